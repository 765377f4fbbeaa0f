// Plain-text tables for the terminal: fixed columns, the last one wrapped.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace pgrac::ctl {

// Splits text into lines of at most width characters at spaces (long words
// are cut). Counts bytes, except that UTF-8 continuation bytes take no column.
std::vector<std::string> wrap_text(const std::string& text, size_t width);

class Table {
  public:
    explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
    void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
    // Columns sized to content; the last column wraps to fit total_width.
    void print(std::ostream& out, size_t total_width = 110) const;

  private:
    std::vector<std::string> headers_;
    std::vector<std::vector<std::string>> rows_;
};

// Display width of a UTF-8 string (code points).
size_t display_width(const std::string& s);

}  // namespace pgrac::ctl
