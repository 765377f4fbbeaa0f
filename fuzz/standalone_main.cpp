// A main() for a fuzz target without libFuzzer: runs LLVMFuzzerTestOneInput
// once on each file named, or on each file in each directory named (a
// corpus), so that ctest replays the corpora in every ordinary build. A
// failed check traps, which fails the test.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int run(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "cannot read %s\n", file.c_str());
        return 1;
    }
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    int failed = 0, ran = 0;
    for (int i = 1; i < argc; i++) {
        const std::filesystem::path p(argv[i]);
        if (std::filesystem::is_directory(p)) {
            for (const auto& e : std::filesystem::directory_iterator(p))
                if (e.is_regular_file()) failed += run(e.path()), ran++;
        } else {
            failed += run(p), ran++;
        }
    }
    std::printf("%d input(s), %d unreadable\n", ran, failed);
    return failed == 0 && ran > 0 ? 0 : 1;
}
