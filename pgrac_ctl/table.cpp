#include "table.hpp"

#include <algorithm>

namespace pgrac::ctl {

size_t display_width(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s)
        if ((c & 0xC0) != 0x80) ++n;
    return n;
}

std::vector<std::string> wrap_text(const std::string& text, size_t width) {
    std::vector<std::string> lines;
    if (width < 8) width = 8;
    std::string line;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find(' ', pos);
        if (end == std::string::npos) end = text.size();
        std::string word = text.substr(pos, end - pos);
        pos = end + 1;
        while (display_width(word) > width) {  // a word longer than a line
            if (!line.empty()) lines.push_back(std::move(line)), line.clear();
            size_t cut = width;
            while (cut > 0 && (static_cast<unsigned char>(word[cut]) & 0xC0) == 0x80) --cut;
            lines.push_back(word.substr(0, cut));
            word.erase(0, cut);
        }
        if (!line.empty() && display_width(line) + 1 + display_width(word) > width) {
            lines.push_back(std::move(line));
            line.clear();
        }
        if (!line.empty()) line += ' ';
        line += word;
    }
    if (!line.empty() || lines.empty()) lines.push_back(line);
    return lines;
}

void Table::print(std::ostream& out, size_t total_width) const {
    const size_t cols = headers_.size();
    std::vector<size_t> w(cols, 0);
    for (size_t c = 0; c < cols; ++c) w[c] = display_width(headers_[c]);
    for (const auto& r : rows_)
        for (size_t c = 0; c < cols && c < r.size(); ++c)
            w[c] = std::max(w[c], display_width(r[c]));
    size_t fixed = 0;
    for (size_t c = 0; c + 1 < cols; ++c) fixed += w[c] + 2;
    const size_t last = total_width > fixed + 20 ? total_width - fixed : 20;
    auto emit = [&](const std::vector<std::string>& r) {
        std::vector<std::string> tail =
            wrap_text(cols && r.size() >= cols ? r[cols - 1] : "", last);
        for (size_t i = 0; i < tail.size(); ++i) {
            std::string line;
            for (size_t c = 0; c + 1 < cols; ++c) {
                const std::string& s = i == 0 && c < r.size() ? r[c] : "";
                line += s + std::string(w[c] - display_width(s) + 2, ' ');
            }
            line += tail[i];
            while (!line.empty() && line.back() == ' ') line.pop_back();  // empty last cells
            out << line << '\n';
        }
    };
    emit(headers_);
    for (const auto& r : rows_) emit(r);
}

}  // namespace pgrac::ctl
