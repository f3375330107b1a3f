# dflash - plain-C DFlash speculative decoding engine.
#   make          build ./dflash and libdflash.a (installs missing Debian -dev packages as root)
#   make test     run the test suite (tests/run.sh)
#   make demo     run DFlash on the shipped demo models
#   make asan     build and test with AddressSanitizer + UBSan
CC      ?= cc
WERROR  ?=
OPT     ?= -O2 -g
CFLAGS  += $(OPT) -std=c11 -Wall -Wextra -Wshadow -Wno-unused-parameter $(WERROR) -pthread \
           -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iinclude -Isrc \
           $(shell pkg-config --cflags libcjson libpcre2-8 libmicrohttpd 2>/dev/null)
LDLIBS  += $(shell pkg-config --libs libcjson libpcre2-8 2>/dev/null) -lutf8proc -lm -pthread
SERVE_LIBS = $(shell pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)
BUILD   ?= build
BIN     ?= dflash

LIB_SRC := $(wildcard src/*.c)
LIB_OBJ := $(LIB_SRC:src/%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/%)

.PHONY: all deps test demo asan clean
all: deps $(BIN) $(BUILD)/simple

deps:
	@sh tools/deps.sh

$(BUILD):
	@mkdir -p $(BUILD)

$(BUILD)/%.o: src/%.c $(wildcard src/*.h include/*.h) | $(BUILD)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libdflash.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

CLI_SRC := cli/main.c cli/serve.c
$(BIN): $(CLI_SRC) cli/serve.h $(BUILD)/serve_page.h $(BUILD)/libdflash.a
	$(CC) $(CFLAGS) -I$(BUILD) $(CLI_SRC) $(BUILD)/libdflash.a $(LDLIBS) $(SERVE_LIBS) -o $@

# the chat page of `dflash serve`, compiled in as a C array (tools/embed.c: no xxd needed)
$(BUILD)/embed: tools/embed.c | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@

$(BUILD)/serve_page.h: cli/serve_page.html $(BUILD)/embed
	$(BUILD)/embed serve_page_html <cli/serve_page.html >$@.tmp && mv $@.tmp $@

$(BUILD)/simple: examples/simple.c include/dflash.h $(BUILD)/libdflash.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $@

$(BUILD)/test_%: tests/test_%.c tests/check.h $(BUILD)/libdflash.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $@

tests: $(TEST_BIN)

test: deps $(BIN) $(BUILD)/simple $(TEST_BIN)
	@DFLASH_BIN=$(abspath $(BIN)) DFLASH_EXAMPLE=$(abspath $(BUILD)/simple) sh tests/run.sh $(BUILD)

asan:
	$(MAKE) BUILD=build-asan BIN=build-asan/dflash \
	    OPT="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" test

demo: deps $(BIN)
	@sh tools/demo.sh

clean:
	rm -rf build build-asan dflash

bench-kernels: bench/kernels_bench.c $(BUILD)/libdflash.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $(BUILD)/kernels_bench && $(BUILD)/kernels_bench

# prompt processing: our GEMM vs OpenBLAS sgemm (apt-get install libopenblas-dev)
# on the matmuls of a model: make bench-prefill PREFILL_MODEL=DIR
PREFILL_MODEL ?= models/demo/target
bench-prefill: bench/prefill_bench.c $(BUILD)/libdflash.a
	@pkg-config --exists openblas || { echo "bench-prefill: needs libopenblas-dev" >&2; exit 1; }
	$(CC) $(CFLAGS) $$(pkg-config --cflags openblas) $< $(BUILD)/libdflash.a $(LDLIBS) $$(pkg-config --libs openblas) -o $(BUILD)/prefill_bench && $(BUILD)/prefill_bench $(PREFILL_MODEL)
