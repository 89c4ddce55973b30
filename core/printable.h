// Text from input on a terminal (docs/DESIGN.md §9 "Untrusted input"): a name, an error or an evidence
// line that came out of a file may hold escape sequences (ESC [2J clears the screen; OSC 52 writes the
// clipboard) or other control characters. What flatline prints of it goes through printable(): every
// C0 control character (but tab, and newline where asked), DEL and the C1 controls of UTF-8
// (U+0080..U+009F) become '?'. Text flatline writes itself keeps its own control codes (the progress
// line's carriage return).
#pragma once
#include <string>
#include <string_view>

namespace flatline {

inline std::string printable(std::string_view s, bool keep_newlines = true) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\t' || (c == '\n' && keep_newlines)) {
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += '?';
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      out += '?';  // a C1 control, UTF-8 encoded (U+009B is a one-character CSI)
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace flatline
