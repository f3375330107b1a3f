/* serve_load.c - a load client for `dflash serve` in C (no node, no
 * network beyond loopback: it runs where the GPU machine has neither), for
 * issue 24's load test on the GPU. One run:
 *
 *   serve_load PORT CONC REQS MAXTOK [TEMP [DRAFT_MAX]]
 *
 * REQS chat requests to 127.0.0.1:PORT/v1/chat/completions (PROMPTS in
 * turn, max_tokens MAXTOK with ignore_eos so each gives exactly MAXTOK
 * tokens; TEMP > 0: sampled, seed 1000 + request number; DRAFT_MAX: the
 * request's draft_max, "auto" or a number; absent: the server's default).
 * First every distinct request is sent alone, one after another (its solo
 * reply); then all REQS with CONC in flight at a time (threads), each reply
 * compared with its solo reply. Prints one JSON line: conc, reqs, tokens,
 * wall_s, tok_per_s (the loaded run's output tokens / wall clock), solo_tok_per_s
 * (the solo replies'), differ (replies under load unlike their solo reply:
 * must be 0), failed (requests without a reply). Exit 1 if any differ or failed.
 *
 * HTTP/1.1 with Connection: close, the body read to EOF (Content-Length or
 * chunked), parsed with cJSON. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *PROMPTS[] = {
    "Solve for x: 3x + 5 = 20.",
    "What is 15% of 80?",
    "Write a Python function that checks whether a number is prime.",
    "Explain what a hash table is in two sentences.",
    "Tell me a short story about a robot.",
    "List three uses of a paperclip.",
    "Write a haiku about the sea.",
    "What is the derivative of x^3 + 2x?",
};
enum { N_PROMPTS = sizeof PROMPTS / sizeof PROMPTS[0], MAX_REQS = 4096, MAX_CONC = 256 };

static int port, conc, n_reqs, max_tok;
static double temp;
static const char *draft_max;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The request body of request k (its prompt and seed). */
static char *body_of(int k) {
    cJSON *o = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(o, "messages"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", PROMPTS[k % N_PROMPTS]);
    cJSON_AddItemToArray(msgs, m);
    cJSON_AddNumberToObject(o, "max_tokens", max_tok);
    cJSON_AddBoolToObject(o, "ignore_eos", 1);
    cJSON_AddNumberToObject(o, "temperature", temp);
    if (temp > 0) cJSON_AddNumberToObject(o, "seed", 1000 + k);
    if (draft_max) {
        if (!strcmp(draft_max, "auto")) cJSON_AddStringToObject(o, "draft_max", "auto");
        else cJSON_AddNumberToObject(o, "draft_max", atoi(draft_max));
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* De-chunk body in place (Transfer-Encoding: chunked); its new length. */
static size_t dechunk(char *body, size_t n) {
    size_t in = 0, out = 0;
    while (in < n) {
        char *end;
        unsigned long len = strtoul(body + in, &end, 16);
        char *crlf = strstr(body + in, "\r\n");
        if (!crlf || end > crlf) break;
        in = (size_t)(crlf - body) + 2;
        if (len == 0 || in + len > n) break;
        memmove(body + out, body + in, len);
        out += len;
        in += len + 2;
    }
    body[out] = 0;
    return out;
}

/* POST the request; the reply's content (malloc'd) and *tokens, or NULL. */
static char *post(const char *req, int *tokens) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return NULL;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return NULL;
    }
    size_t bl = strlen(req);
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      bl);
    if (write(fd, head, (size_t)hl) != hl || write(fd, req, bl) != (ssize_t)bl) {
        close(fd);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    char *body = strstr(buf, "\r\n\r\n"), *content = NULL;
    if (body && !strncmp(buf, "HTTP/1.1 200", 12)) {
        *body = 0; /* the headers end here */
        body += 4;
        size_t len = n - (size_t)(body - buf);
        if (strstr(buf, "chunked") || strstr(buf, "Chunked")) len = dechunk(body, len);
        cJSON *o = cJSON_ParseWithLength(body, len);
        cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
        cJSON *txt = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content");
        cJSON *ct = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "completion_tokens");
        if (cJSON_IsString(txt) && cJSON_IsNumber(ct)) {
            content = strdup(txt->valuestring);
            *tokens = ct->valueint;
        }
        cJSON_Delete(o);
    } else {
        fprintf(stderr, "serve_load: %.200s\n", n ? buf : "no reply");
    }
    free(buf);
    return content;
}

static char *solo[MAX_REQS], *got[MAX_REQS];
static int got_tok[MAX_REQS];
static int next_req;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        int k = next_req < n_reqs ? next_req++ : -1;
        pthread_mutex_unlock(&mu);
        if (k < 0) return NULL;
        char *b = body_of(k);
        got[k] = post(b, &got_tok[k]);
        free(b);
    }
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: serve_load PORT CONC REQS MAXTOK [TEMP [DRAFT_MAX]]\n");
        return 2;
    }
    port = atoi(argv[1]), conc = atoi(argv[2]), n_reqs = atoi(argv[3]), max_tok = atoi(argv[4]);
    temp = argc > 5 ? atof(argv[5]) : 0;
    draft_max = argc > 6 ? argv[6] : NULL;
    if (port <= 0 || conc < 1 || conc > MAX_CONC || n_reqs < 1 || n_reqs > MAX_REQS || max_tok < 1) {
        fprintf(stderr, "serve_load: bad arguments (CONC 1..%d, REQS 1..%d)\n", MAX_CONC, MAX_REQS);
        return 2;
    }
    /* a distinct request per prompt (greedy) or per request (sampled: its seed) */
    int distinct = temp > 0 ? n_reqs : (n_reqs < N_PROMPTS ? n_reqs : N_PROMPTS), solo_tok = 0;
    double t0 = now();
    for (int k = 0; k < distinct; k++) {
        int t = 0;
        char *b = body_of(k);
        solo[k] = post(b, &t);
        free(b);
        solo_tok += t;
    }
    double solo_s = now() - t0;
    pthread_t th[MAX_CONC];
    t0 = now();
    for (int i = 0; i < conc; i++) pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < conc; i++) pthread_join(th[i], NULL);
    double wall = now() - t0;
    long tokens = 0;
    int differ = 0, failed = 0;
    for (int k = 0; k < n_reqs; k++) {
        const char *ref = solo[temp > 0 ? k : k % N_PROMPTS];
        if (!got[k] || !ref) {
            failed++;
            continue;
        }
        tokens += got_tok[k];
        if (strcmp(got[k], ref) != 0) {
            if (differ++ < 3) fprintf(stderr, "serve_load: request %d differs from its solo reply\n", k);
        }
    }
    printf("{\"conc\":%d,\"reqs\":%d,\"max_tokens\":%d,\"temp\":%g,\"tokens\":%ld,\"wall_s\":%.3f,\"tok_per_s\":%.1f,"
           "\"solo_tok_per_s\":%.1f,\"differ\":%d,\"failed\":%d}\n",
           conc, n_reqs, max_tok, temp, tokens, wall, tokens / wall, solo_tok / solo_s, differ, failed);
    for (int k = 0; k < MAX_REQS; k++) free(solo[k]), free(got[k]);
    return differ || failed ? 1 : 0;
}
