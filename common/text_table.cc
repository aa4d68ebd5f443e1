#include "common/text_table.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace pdserve {

std::string Table::ToString() const {
  std::vector<size_t> width(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c)
      width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      out += (c == 0 ? "" : "  ") + cell + std::string(width[c] - cell.size(), ' ');
    }
    return std::string(absl::StripTrailingAsciiWhitespace(out)) + "\n";
  };
  std::string out = line(header_);
  std::string rule;
  for (size_t c = 0; c < width.size(); ++c)
    rule += (c == 0 ? "" : "  ") + std::string(width[c], '-');
  out += rule + "\n";
  for (const auto& row : rows_) out += line(row);
  return out;
}

std::string Fixed(double v, int decimals) { return absl::StrFormat("%.*f", decimals, v); }

}  // namespace pdserve
