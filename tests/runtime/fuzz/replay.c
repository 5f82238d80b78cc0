/*
 * replay.c — runs a fuzz target over saved inputs without libFuzzer (any C compiler), so the
 * regression inputs under tests/fixtures/fuzz/ are checked on every test run, under ASan.
 *   replay FILE...   prints "N passed, 0 failed" when no input crashed
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    int n = 0;
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
        size_t got = fread(buf, 1, (size_t)len, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, got);
        free(buf);
        n++;
    }
    printf("%d passed, 0 failed\n", n);
    return 0;
}
