/* vocab.h - the draft's vocabulary: a frequency ranking of token ids (a
 * rank file), counted from text, written and read. Prefix: voc_.
 *
 * A DFlash draft proposes tokens from its LM head; scoring only part of the
 * vocabulary makes the draft block cheaper and costs acceptance only where
 * the target's token lies outside the part (a draft only proposes: output
 * never changes). FR-Spec's idea is to keep the ids that are most frequent
 * in ordinary text rather than the ids below a number.
 *
 * Rank file (text, UTF-8 free: digits only):
 *   line 1: "dflash-vocab-rank 1 V"  (format version 1; V = the vocabulary
 *           size of the model the ranking is for, its config's vocab_size)
 *   then one line per ranked id, most frequent first: "ID COUNT", with
 *   0 <= ID < V, each ID once, COUNT >= 1 and never larger than the line
 *   before's. Blank lines and lines starting with '#' are skipped.
 * Ids the file does not list were never seen in the corpus. */
#ifndef DFL_VOCAB_H
#define DFL_VOCAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int vocab;        /* V of the header */
    int n;            /* ids listed */
    int32_t *ids;     /* [n] most frequent first */
    int64_t *counts;  /* [n] their counts (non-increasing) */
} voc_rank;

/* Parse a rank file's text (len bytes, need not be NUL-terminated). name
 * is used in messages ("FILE line N: ..."). vocab > 0: the header's V must
 * equal it. 0, or -1 + dfl_seterr naming the line and the culprit. */
int voc_rank_parse(const char *text, size_t len, const char *name, int vocab, voc_rank *out);
/* voc_rank_parse of a file's contents. */
int voc_rank_read(const char *path, int vocab, voc_rank *out);
void voc_rank_free(voc_rank *r);

/* The ranking of counts[0..vocab) (ids with count 0 left out; ties: the
 * smaller id first) written to path through a temporary file. 0, or -1 +
 * dfl_seterr. */
int voc_rank_write(const char *path, const int64_t *counts, int vocab);

/* The n ids a draft scores for a ranking: the first n of r (n > r->n: the
 * rest are the smallest ids r does not list), sorted ascending into
 * out[0..n). n must be 1..r->vocab. */
void voc_select(const voc_rank *r, int n, int32_t *out);

#endif
