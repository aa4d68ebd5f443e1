// A plain-text table with aligned columns (benchmark reports, pdctl output) and fixed-point
// number formatting.
// Thread-safety: a value type.
#ifndef PDSERVE_COMMON_TEXT_TABLE_H_
#define PDSERVE_COMMON_TEXT_TABLE_H_

#include <string>
#include <vector>

namespace pdserve {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Header, a rule, then the rows; columns separated by two spaces, no trailing blanks.
  std::string ToString() const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// `v` with `decimals` digits after the point.
std::string Fixed(double v, int decimals = 2);

}  // namespace pdserve

#endif  // PDSERVE_COMMON_TEXT_TABLE_H_
