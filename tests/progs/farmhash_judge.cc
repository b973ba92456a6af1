// FarmHash's own Fingerprint64 (Debian's libfarmhash), as an independent judge of
// src/features/fingerprint.c: tests/test_fingerprint.c feeds it byte strings and compares.
//
// Reads lines from stdin, each a byte string in hex (an empty line is the empty string), and
// prints one line per input with the decimal fingerprint. A line that is not hex is an error
// (exit 2): a judge that guessed would let a broken comparison pass.
#include <farmhash.h>

#include <cstdio>
#include <iostream>
#include <string>

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int main()
{
    std::string line, bytes;
    for (long line_no = 1; std::getline(std::cin, line); line_no++) {
        if (!line.empty() && line.back() == '\r')
            line.pop_back();
        if (line.size() % 2 != 0) {
            std::fprintf(stderr, "farmhash_judge: line %ld: odd number of hex digits\n", line_no);
            return 2;
        }
        bytes.clear();
        for (size_t i = 0; i < line.size(); i += 2) {
            int hi = hex_digit(line[i]), lo = hex_digit(line[i + 1]);
            if (hi < 0 || lo < 0) {
                std::fprintf(stderr, "farmhash_judge: line %ld: not hex at column %zu\n", line_no,
                             i + 1);
                return 2;
            }
            bytes.push_back(static_cast<char>(hi << 4 | lo));
        }
        std::printf("%llu\n", static_cast<unsigned long long>(
                                  util::Fingerprint64(bytes.data(), bytes.size())));
    }
    return std::fflush(stdout) == 0 && !std::ferror(stdout) ? 0 : 1;
}
