// Text that came from the network, made safe to print: a peer's name, an abort's reason or any
// other bytes it sent may hold a newline (which would forge a whole log line), a terminal escape
// code, or bytes that are not text at all. Every place that logs or prints such text passes it
// through `printable` first (ENGINEERING.md: text from the network is data).
#pragma once

#include <string>
#include <string_view>

namespace rig::remote {

// `text` with every byte outside printable ASCII written as an escape: `\n`, `\r`, `\t`, `\\`,
// and `\xHH` for the rest (other control bytes, DEL, and every byte of 0x80 and above, so that no
// UTF-8 sequence of a C1 control reaches a terminal). Printable ASCII is kept as it is, so the
// result of text that needed no escape is the text itself. Pure; any thread.
std::string printable(std::string_view text);

// `text` as it is if every byte of it is printable ASCII, else `printable(text)`. For text that
// should be printable already, as every text a rig process sends is (a root cause carries its
// peers' bytes escaped): an honest peer's text is not escaped a second time, and a broken or
// hostile one's is escaped whole. Pure; any thread.
std::string printable_once(std::string_view text);

}  // namespace rig::remote
