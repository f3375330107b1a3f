/* stopstr.h - stop strings over streamed text. Prefix: ss_.
 *
 * Text arrives in pieces (whole UTF-8 characters, as dflash_on_token gives
 * them). ss_feed() passes on the text that can no longer be part of a stop
 * string and holds back a tail that could still be the start of one, so a
 * stop string split across pieces is cut exactly and never shown:
 *
 *   ss_matcher *s = ss_new(stops, n);
 *   per piece:  if (ss_feed(s, piece, len, out, ud)) stop generating;
 *   at the end: ss_finish(s, out, ud);      (the held tail, if no stop matched)
 *   ss_free(s);
 *
 * Invariant: the held tail pend[0..npend) is a proper prefix of some stop
 * string, so npend < the longest stop string; everything before it has been
 * passed to out. Since stop strings are valid UTF-8 and the tail starts where
 * a stop string starts, out() always gets whole characters. Empty stop
 * strings are ignored. */
#ifndef DFL_STOPSTR_H
#define DFL_STOPSTR_H

#include <stddef.h>

typedef struct ss_matcher ss_matcher;

/* Receives text that is final (never part of a stop string). */
typedef void (*ss_out_fn)(void *ud, const char *text, size_t len);

/* Copies the n strings. NULL on allocation failure. */
ss_matcher *ss_new(const char *const *stops, int n);
void ss_free(ss_matcher *s);

/* Feed text[0..len). Returns 1 when a stop string has completed: out() got
 * the text before it and everything after it is dropped (later calls do
 * nothing and return 1). Returns 0 otherwise. */
int ss_feed(ss_matcher *s, const char *text, size_t len, ss_out_fn out, void *ud);

/* End of the text: pass on the held tail (nothing after a match). */
void ss_finish(ss_matcher *s, ss_out_fn out, void *ud);

/* 1 once a stop string has matched. */
int ss_matched(const ss_matcher *s);

#endif
