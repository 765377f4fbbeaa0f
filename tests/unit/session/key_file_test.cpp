// load_key_file against real files with real modes in a private temp directory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "ic/session/handshake.hpp"

namespace pgrac::ic {
namespace {

class KeyFile : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string tmpl = ::testing::TempDir() + "pgrac_keyfile_XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
        dir_ = tmpl;
    }
    void TearDown() override {
        for (const std::string& f : files_) std::remove(f.c_str());
        ::rmdir(dir_.c_str());
    }

    std::string write(const std::string& name, const std::string& content, mode_t mode) {
        const std::string path = dir_ + "/" + name;
        std::ofstream(path, std::ios::binary) << content;
        EXPECT_EQ(::chmod(path.c_str(), mode), 0);
        files_.push_back(path);
        return path;
    }

    std::string dir_;
    std::vector<std::string> files_;
};

TEST_F(KeyFile, Mode0600IsAcceptedAndTrailingWhitespaceStripped) {
    const std::string path = write("key", "0123456789abcdef-secret \t\r\n\n", 0600);
    std::string error;
    auto key = load_key_file(path, &error);
    ASSERT_TRUE(key.has_value()) << error;
    EXPECT_EQ(std::string(key->begin(), key->end()), "0123456789abcdef-secret");
}

TEST_F(KeyFile, Mode0400IsAccepted) {
    const std::string path = write("key", "0123456789abcdef", 0400);
    std::string error;
    EXPECT_TRUE(load_key_file(path, &error).has_value()) << error;
}

TEST_F(KeyFile, GroupOrOtherAccessIsRefused) {
    for (mode_t mode : {0644, 0640, 0604, 0660, 0601}) {
        const std::string path = write("key", "0123456789abcdef-secret", mode);
        std::string error;
        EXPECT_FALSE(load_key_file(path, &error).has_value()) << std::oct << mode;
        char want[8];
        std::snprintf(want, sizeof want, "%04o", static_cast<unsigned>(mode));
        EXPECT_NE(error.find(std::string("has mode ") + want), std::string::npos) << error;
        EXPECT_NE(error.find("chmod 0600 " + path), std::string::npos) << error;
    }
}

TEST_F(KeyFile, TooShortIsRefused) {
    // 15 key bytes plus whitespace that does not count.
    const std::string path = write("key", "0123456789abcde    \n", 0600);
    std::string error;
    EXPECT_FALSE(load_key_file(path, &error).has_value());
    EXPECT_NE(error.find("holds 15 bytes"), std::string::npos) << error;
    EXPECT_NE(error.find("at least 16"), std::string::npos) << error;

    const std::string empty = write("empty", "", 0600);
    EXPECT_FALSE(load_key_file(empty, &error).has_value());
    EXPECT_NE(error.find("holds 0 bytes"), std::string::npos) << error;
}

TEST_F(KeyFile, ShortOrNonRandomKeysGetAWarning) {
    std::string error, warning;
    ASSERT_TRUE(load_key_file(write("k16", "0123456789abcdef\n", 0600), &error, &warning));
    EXPECT_NE(warning.find("16 bytes of key; use at least 32"), std::string::npos) << warning;
    warning.clear();
    ASSERT_TRUE(load_key_file(write("kaaa", std::string(40, 'a'), 0600), &error, &warning));
    EXPECT_NE(warning.find("1 distinct byte values"), std::string::npos) << warning;
    warning.clear();
    ASSERT_TRUE(load_key_file(
        write("khex", "3f2a9c1b7e5d4086af13c2e9b0d7f6a18e4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a\n", 0600),
        &error, &warning));
    EXPECT_EQ(warning, "");
}

TEST_F(KeyFile, InnerWhitespaceAndBinaryBytesAreKept) {
    const std::string content("key with spaces\0\x01\xff!", 19);
    const std::string path = write("key", content + "\n", 0600);
    std::string error;
    auto key = load_key_file(path, &error);
    ASSERT_TRUE(key.has_value()) << error;
    EXPECT_EQ(std::string(key->begin(), key->end()), content);
}

TEST_F(KeyFile, MissingFileIsRefused) {
    std::string error;
    EXPECT_FALSE(load_key_file(dir_ + "/absent", &error).has_value());
    EXPECT_NE(error.find("could not open key file \"" + dir_ + "/absent\""), std::string::npos)
        << error;
    EXPECT_NE(error.find("No such file"), std::string::npos) << error;
}

TEST_F(KeyFile, DirectoryIsRefused) {
    ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
    std::string error;
    EXPECT_FALSE(load_key_file(dir_, &error).has_value());
    EXPECT_NE(error.find("is not a regular file"), std::string::npos) << error;
}

TEST_F(KeyFile, HugeFileIsRefused) {
    const std::string path = write("big", std::string(5000, 'k'), 0600);
    std::string error;
    EXPECT_FALSE(load_key_file(path, &error).has_value());
    EXPECT_NE(error.find("5000 bytes"), std::string::npos) << error;
}

}  // namespace
}  // namespace pgrac::ic
