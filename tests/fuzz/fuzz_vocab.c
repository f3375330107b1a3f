/* fuzz_vocab.c - the rank file parser (src/vocab.c) on arbitrary bytes.
 * Byte 0, bit 0: parse for a model of 1000 ids (the header must say 1000),
 * else for any vocabulary; the rest is the file. Oracle: no crash or
 * sanitizer report; a refused file leaves nothing allocated and names the
 * file; an accepted one lists n >= 1 distinct ids below its vocabulary with
 * counts >= 1, never increasing (headers over 2^20 ids stop here); written back (voc_rank_write) and read
 * again it gives the same ids with the same counts; voc_select of 1, n and
 * min(vocab, n + 5) ids gives distinct ascending ids, the top n first. */
#include "fuzz_common.h"
#include "util.h"
#include "vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int vocab = data[0] & 1 ? 1000 : 0;
    voc_rank r;
    if (voc_rank_parse((const char *)data + 1, size - 1, "fuzz.rank", vocab, &r) != 0) {
        if (r.ids || r.counts || r.n || !strstr(dfl_lasterr(), "fuzz.rank")) abort();
        return 0;
    }
    if (r.n < 1 || r.vocab < 1 || (vocab && r.vocab != vocab)) abort();
    if (r.vocab > (1 << 20)) { /* a huge header: the checks below would spend the time in calloc */
        voc_rank_free(&r);
        return 0;
    }
    int64_t *counts = calloc((size_t)r.vocab, sizeof *counts);
    if (!counts) abort();
    for (int i = 0; i < r.n; i++) {
        if (r.ids[i] < 0 || r.ids[i] >= r.vocab || counts[r.ids[i]] || r.counts[i] < 1) abort();
        if (i && r.counts[i] > r.counts[i - 1]) abort();
        counts[r.ids[i]] = r.counts[i];
    }
    const char *file = fz_file("rank.txt", NULL, 0);
    if (voc_rank_write(file, counts, r.vocab) != 0) abort();
    voc_rank back;
    if (voc_rank_read(file, r.vocab, &back) != 0 || back.n != r.n) abort();
    for (int i = 0; i < back.n; i++)
        if (counts[back.ids[i]] != back.counts[i]) abort();
    voc_rank_free(&back);
    int sizes[3] = {1, r.n, r.n + 5 < r.vocab ? r.n + 5 : r.vocab};
    int32_t *sel = malloc(sizeof(int32_t) * (size_t)sizes[2] + 4);
    for (int k = 0; k < 3; k++) {
        int n = sizes[k] < sizes[2] ? sizes[k] : sizes[2];
        voc_select(&r, n, sel);
        for (int i = 0; i < n; i++)
            if (sel[i] < 0 || sel[i] >= r.vocab || (i && sel[i] <= sel[i - 1])) abort();
        if (n >= r.n) /* every listed id is in */
            for (int i = 0; i < r.n; i++) {
                int found = 0;
                for (int j = 0; j < n && !found; j++) found = sel[j] == r.ids[i];
                if (!found) abort();
            }
    }
    free(sel);
    free(counts);
    voc_rank_free(&r);
    return 0;
}
