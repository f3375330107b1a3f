/* nfc_newer_than_9.c - prints NFC_NEWER_THAN_9 for src/tokenizer.c.
 *
 * HF tokenizers normalizes with Unicode 9.0 tables; utf8proc has newer ones.
 * This lists, as ranges, the code points that are not assigned in Unicode
 * 9.0 but that utf8proc treats as more than an inert starter (non-zero
 * combining class, canonical decomposition, or a part in a composition).
 * Input on stdin: Perl's inversion list of the characters present in 9.0.
 *   perl -MUnicode::UCD=prop_invlist -e 'print join(" ", prop_invlist("In=9.0")), "\n"' \
 *     | (cc -O2 tools/reference/nfc_newer_than_9.c -lutf8proc -o /tmp/nfc9 && /tmp/nfc9) */
#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>

static unsigned char in9[0x110000];

int main(void) {
    long v, start = -1, prev = -2, lo = -1;
    int k = 0, nr = 0;
    while (scanf("%ld", &v) == 1) { /* inversion list: [v0, v1) in, [v1, v2) out, ... */
        if (k++ % 2 == 0) lo = v;
        else for (long c = lo; c < v; c++) in9[c] = 1;
    }
    if (k % 2 == 1) for (long c = lo; c < 0x110000; c++) in9[c] = 1;
    for (long c = 0; c <= 0x110000; c++) {
        int rel = 0;
        if (c < 0x110000 && !in9[c] && !(c >= 0xd800 && c <= 0xdfff)) {
            const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)c);
            rel = p->combining_class != 0 || (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) ||
                  p->comb_index != UINT16_MAX;
        }
        if (!rel) continue;
        if (c != prev + 1) {
            if (start >= 0) printf("{0x%04lX, 0x%04lX},%s", start, prev, ++nr % 4 ? " " : "\n");
            start = c;
        }
        prev = c;
    }
    if (start >= 0) printf("{0x%04lX, 0x%04lX},\n", start, prev);
    fprintf(stderr, "utf8proc %s (Unicode %s)\n", utf8proc_version(), utf8proc_unicode_version());
    return 0;
}
