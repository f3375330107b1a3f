# dflash - plain-C DFlash speculative decoding engine.
#   make          build ./dflash, libdflash.a and libdflash.so (installs missing Debian -dev
#                 packages as root)
#   make install  PREFIX=/usr/local DESTDIR=: dflash, dflash.h, the libraries, dflash.pc
#   make test     run the test suite (tests/run.sh): the model tests once per
#                 kernel variant this CPU runs
#   make test-isa a subset of the tests under qemu-x86_64 -cpu Nehalem / Haswell (tests/isa.sh)
#                 (tests/isa.sh: the generic and AVX2 paths on any x86-64 host)
#   make demo     run DFlash on the shipped demo models
#   make unpack   just the files committed as .xz (the tokenizers, the demo weights)
#   make asan     build and test with AddressSanitizer + UBSan
#   make tsan     the thread pool, two-models and batched-sequences tests under ThreadSanitizer
#   make CUDA=1   also build the CUDA backend (src/cuda/*.cu, nvcc; CUDA_ARCH=sm_90
#                 by default); make CUDA=1 test-cuda runs tests/cuda on the GPU
CC      ?= cc
WERROR  ?=
OPT     ?= -O2 -g
# the libraries' flags: pkg-config's, or (ARM64=1, below) the arm64 sysroot's
PKG_CFLAGS = $(shell pkg-config --cflags libcjson libpcre2-8 libmicrohttpd 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs libcjson libpcre2-8 2>/dev/null)
SERVE_LIBS = $(shell pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)
# chat line editing when libedit is there (tools/deps.sh installs libedit-dev);
# expanded when used, i.e. after the dependency step
EDIT_CFLAGS = $(shell pkg-config --exists libedit 2>/dev/null && echo -DDFLASH_LIBEDIT)
EDIT_LIBS = $(shell pkg-config --exists libedit 2>/dev/null && pkg-config --libs libedit)
DEPS_SH ?= sh tools/deps.sh
BUILD   ?= build
# the compiler of the tools the build runs on this machine (tools/embed.c)
HOSTCC  ?= $(CC)
HOST_CFLAGS ?= $(CFLAGS)

# ARM64=1 (make cross-arm64 sets it): cross-build for arm64 Linux into
# build-arm64 with Debian's aarch64-linux-gnu-gcc, against the arm64 Debian
# libraries tools/arm64/fetch_deps.sh unpacks into .arm64/root (pkg-config
# knows nothing of them: the flags are spelled out); that script is the
# dependency step, so no amd64 -dev package is asked for.
ifeq ($(ARM64),1)
ARM64_ROOT := $(CURDIR)/.arm64/root
ARM64_LIBDIRS := $(ARM64_ROOT)/usr/lib/aarch64-linux-gnu $(ARM64_ROOT)/lib/aarch64-linux-gnu
CC      := aarch64-linux-gnu-gcc
BUILD   := build-arm64
BIN     := build-arm64/dflash
PKG_CFLAGS := -isystem $(ARM64_ROOT)/usr/include -I$(ARM64_ROOT)/usr/include/cjson
PKG_LIBS := $(ARM64_LIBDIRS:%=-L%) $(ARM64_LIBDIRS:%=-Wl,-rpath-link,%) -lcjson -lpcre2-8
SERVE_LIBS := -lmicrohttpd
EDIT_CFLAGS = $(if $(wildcard $(ARM64_ROOT)/usr/include/histedit.h),-DDFLASH_LIBEDIT -I$(ARM64_ROOT)/usr/include/editline)
EDIT_LIBS = $(if $(wildcard $(ARM64_ROOT)/usr/include/histedit.h),-ledit)
DEPS_SH := sh tools/arm64/fetch_deps.sh
HOSTCC  := cc
HOST_CFLAGS := -O2 -std=c11
endif

# -fPIC for libdflash.so; -fvisibility=hidden: the .so exports the DFLASH_API
# functions of dflash.h only (the tests link libdflash.a and see everything)
CFLAGS  += $(OPT) -fPIC -fvisibility=hidden -std=c11 -Wall -Wextra -Wshadow -Wno-unused-parameter $(WERROR) -pthread \
           -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iinclude -Isrc $(PKG_CFLAGS)
LDLIBS  += $(PKG_LIBS) -lutf8proc -lm -pthread
ifeq ($(CUDA),1)
BUILD   := build-cuda
endif
BIN     ?= dflash

# The version is dflash.h's (DFLASH_VERSION_STRING): the soname takes the major
VERSION := $(shell sed -n 's/^\#define DFLASH_VERSION_STRING "\(.*\)"/\1/p' include/dflash.h)
SONAME  := libdflash.so.$(firstword $(subst ., ,$(VERSION)))
SHLIB   := libdflash.so.$(VERSION)
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
LIBDIR  ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

# src/*.c: the ground floor and the engine; src/cpu/*.c: the CPU backend
# (objects cpu_*.o); src/cuda/*.cu: the CUDA backend (CUDA=1, cuda_*.o)
LIB_SRC := $(wildcard src/*.c)
LIB_OBJ := $(LIB_SRC:src/%.c=$(BUILD)/%.o)
CPU_SRC := $(wildcard src/cpu/*.c)
LIB_OBJ += $(CPU_SRC:src/cpu/%.c=$(BUILD)/cpu_%.o)
LIB_HDR := $(wildcard src/*.h src/cpu/*.h include/*.h)

# CUDA backend: objects in their own build directory (the registry in
# backend.c is compiled with -DDFLASH_CUDA there), linked against cudart.
CUDA      ?=
NVCC      ?= nvcc
CUDA_ARCH ?= sm_90
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))
NVCCFLAGS ?= -std=c++17 -O3 -arch=$(CUDA_ARCH) -lineinfo -Xcompiler -fPIC,-fvisibility=hidden
ifeq ($(CUDA),1)
CFLAGS  += -DDFLASH_CUDA
CU_SRC  := $(wildcard src/cuda/*.cu)
LIB_OBJ += $(CU_SRC:src/cuda/%.cu=$(BUILD)/cuda_%.o)
LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++
endif
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/%)

GIT_REV = $(shell git rev-parse --short HEAD 2>/dev/null)

.PHONY: bench-serve-load bench-batch bench-prefix bench-seq-mem bench-rollback bench-tree bench-verify bench-vocab all deps unpack test test-isa demo asan tsan clean fuzz test-cuda install uninstall bench-attn cross-arm64 test-arm64
all: deps $(BIN) $(BUILD)/simple $(BUILD)/libdflash.so

# The dependency step runs once, before any compile: every object waits for
# the stamp (order-only), so make -j cannot race apt-get. DFLASH_NO_DEPS=1
# skips it (tools/deps.sh).
DEPS_STAMP := $(BUILD)/.deps-ok
$(DEPS_STAMP): $(lastword $(DEPS_SH)) | $(BUILD)
	@$(DEPS_SH) && touch $@
# The Qwen3, gpt-oss and Gemma 3 tokenizers and the demo pair's weights are committed xz-compressed
# (tokenizer.json 11 MB -> 1.4 MB, gpt-oss's 27.9 -> 2.9 MB, Gemma 3's 33.4 -> 3.5 MB and its
# tokenizer_config.json 1.16 MB -> 8 KB, target 28.6 -> 13.1 MB, draft 6.3 -> 4.5 MB,
# xz -9e; unpacking takes about a second), so the tree stays small enough to
# travel to the GPU machine; the plain files are made here, once, and ignored
# by git. xz checks its own CRC; without xz (some GPU machines) Python's lzma
# unpacks them. `make unpack` makes just these files.
TOKENIZER_JSON := models/qwen3-tokenizer/tokenizer.json models/gptoss-tokenizer/tokenizer.json \
  models/gemma3-tokenizer/tokenizer.json models/gemma3-tokenizer/tokenizer_config.json
DEMO_MODELS := models/demo/target/model.safetensors models/demo/draft/model.safetensors
# the tiny test models and the GGUF fixtures (tests/fixtures/README.md) travel as .xz too
# (bf16 weights: 19.2 -> 14.5 MB): every tests/models/*/*.safetensors.xz and
# tests/fixtures/gguf/*.gguf.xz
TEST_MODELS := $(patsubst %.xz,%,$(wildcard tests/models/*/*.safetensors.xz tests/fixtures/gguf/*.gguf.xz))
# the Qwen3 draft-vocabulary ranking (--draft-vocab freq:N; 434 KB -> 67 KB; bench/NOTES.md)
VOCAB_RANK := models/qwen3-tokenizer/vocab_rank.txt
UNPACKED := $(TOKENIZER_JSON) $(VOCAB_RANK) $(DEMO_MODELS) $(TEST_MODELS)
$(UNPACKED): %: %.xz | $(DEPS_STAMP)
	@{ xz -dc $< 2>/dev/null || python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' $<; } >$@.tmp && mv $@.tmp $@
unpack: $(UNPACKED)
deps: $(DEPS_STAMP) $(UNPACKED)

$(BUILD):
	@mkdir -p $(BUILD)

$(BUILD)/%.o: src/%.c $(LIB_HDR) | $(BUILD) $(DEPS_STAMP)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/cpu_%.o: src/cpu/%.c $(LIB_HDR) | $(BUILD) $(DEPS_STAMP)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/cuda_%.o: src/cuda/%.cu $(wildcard src/cuda/*.cuh src/cuda/*.h) $(LIB_HDR) | $(BUILD) $(DEPS_STAMP)
	$(NVCC) $(NVCCFLAGS) -Isrc -Iinclude -DDFLASH_CUDA -c $< -o $@

$(BUILD)/libdflash.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

# libdflash.so.X.Y.Z with soname libdflash.so.X, and the two links to it
$(BUILD)/$(SHLIB): $(LIB_OBJ)
	$(CC) $(CFLAGS) -shared -Wl,-soname,$(SONAME) $^ $(LDLIBS) -o $@

$(BUILD)/libdflash.so: $(BUILD)/$(SHLIB)
	ln -sf $(SHLIB) $(BUILD)/$(SONAME) && ln -sf $(SONAME) $@

# pkg-config file for PREFIX (written at install time: PREFIX may change)
define DFLASH_PC
prefix=$(PREFIX)
libdir=$(LIBDIR)
includedir=$(INCLUDEDIR)

Name: dflash
Description: LLM inference with DFlash speculative decoding (C library)
Version: $(VERSION)
Requires.private: libcjson libpcre2-8
Libs: -L$${libdir} -ldflash
Libs.private: -lutf8proc -lm -pthread
Cflags: -I$${includedir}
endef
export DFLASH_PC

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 755 $(BIN) $(DESTDIR)$(BINDIR)/dflash
	install -m 644 include/dflash.h $(DESTDIR)$(INCLUDEDIR)/dflash.h
	install -m 644 $(BUILD)/libdflash.a $(DESTDIR)$(LIBDIR)/libdflash.a
	install -m 755 $(BUILD)/$(SHLIB) $(DESTDIR)$(LIBDIR)/$(SHLIB)
	ln -sf $(SHLIB) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libdflash.so
	printf '%s\n' "$$DFLASH_PC" >$(DESTDIR)$(PKGCONFIGDIR)/dflash.pc
	@case "$(DESTDIR)$(LIBDIR)" in /usr/lib|/usr/local/lib) command -v ldconfig >/dev/null && [ -w /etc/ld.so.cache ] && ldconfig || true ;; esac

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/dflash $(DESTDIR)$(INCLUDEDIR)/dflash.h $(DESTDIR)$(LIBDIR)/libdflash.a \
	    $(DESTDIR)$(LIBDIR)/$(SHLIB) $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libdflash.so \
	    $(DESTDIR)$(PKGCONFIGDIR)/dflash.pc

CLI_SRC := cli/main.c cli/serve.c
# .dflash-build names the build directory ./dflash was last linked from, so
# switching between make and make CUDA=1 relinks it.
# (ARM64=1 links build-arm64/dflash: ./dflash is not its concern.)
ifneq ($(ARM64),1)
$(shell [ "$$(cat .dflash-build 2>/dev/null)" = "$(BUILD)" ] || echo "$(BUILD)" > .dflash-build)
DFLASH_BUILD_STAMP := .dflash-build
endif
$(BIN): $(CLI_SRC) cli/serve.h $(BUILD)/serve_page.h $(BUILD)/libdflash.a $(DFLASH_BUILD_STAMP)
	$(CC) $(CFLAGS) $(EDIT_CFLAGS) -DDFLASH_GIT_REV='"$(GIT_REV)"' -I$(BUILD) $(CLI_SRC) $(BUILD)/libdflash.a $(LDLIBS) $(SERVE_LIBS) $(EDIT_LIBS) -o $@

# the chat page of `dflash serve`, compiled in as a C array (tools/embed.c: no xxd needed)
$(BUILD)/embed: tools/embed.c | $(BUILD)
	$(HOSTCC) $(HOST_CFLAGS) $< -o $@

$(BUILD)/serve_page.h: cli/serve_page.html $(BUILD)/embed
	$(BUILD)/embed serve_page_html <cli/serve_page.html >$@.tmp && mv $@.tmp $@

$(BUILD)/simple: examples/simple.c include/dflash.h $(BUILD)/libdflash.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $@

$(BUILD)/test_%: tests/test_%.c $(wildcard tests/*.h) $(BUILD)/libdflash.a | $(DEPS_STAMP)
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $@

# the kernel variants this CPU runs (tests/run.sh, tests/isa.sh)
$(BUILD)/variants: tools/variants.c $(BUILD)/libdflash.a | $(DEPS_STAMP)
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $@

tests: $(TEST_BIN)

test: deps $(BIN) $(BUILD)/simple $(BUILD)/libdflash.so $(TEST_BIN) $(BUILD)/variants
	@DFLASH_BIN=$(abspath $(BIN)) DFLASH_EXAMPLE=$(abspath $(BUILD)/simple) DFLASH_BUILD=$(BUILD) \
	    DFLASH_OPT="$(OPT)" CC="$(CC)" sh tests/run.sh $(BUILD)

# A subset of the tests under qemu-user's CPU models without AVX-512 and
# without AVX (tests/isa.sh; installs qemu-user if missing; DFLASH_FAST=1
# sizes unless DFLASH_FAST= is given): ISA_TESTS under a model whose variant
# the host does not run itself (ISA_FULL=1: under every model), test_kernels
# alone under the others; DFlash = greedy on the demo pair runs through
# ./dflash under each (test_dflash's full sets take minutes under qemu:
# ISA_TESTS="... test_dflash" adds them).
ISA_TESTS ?= test_kernels test_attention test_sample test_model test_gguf
test-isa: deps $(BIN) $(ISA_TESTS:%=$(BUILD)/%) $(BUILD)/variants
	@ISA_TESTS="$(ISA_TESTS)" DFLASH_BIN=$(abspath $(BIN)) sh tests/isa.sh $(BUILD)

asan:
	$(MAKE) BUILD=build-asan BIN=build-asan/dflash \
	    OPT="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" test

# ThreadSanitizer: the tests that run threads against each other (worker
# pools; models on several threads; sequences batched across threads); any
# report fails the test (exit 66)
TSAN_TESTS ?= test_threads test_two_models test_batch
tsan:
	$(MAKE) BUILD=build-tsan BIN=build-tsan/dflash OPT="-O1 -g -fsanitize=thread -fno-omit-frame-pointer" \
	    build-tsan/.deps-ok $(UNPACKED) $(TSAN_TESTS:%=build-tsan/%)
	@TSAN_OPTIONS="second_deadlock_stack=1 $(TSAN_OPTIONS)" DFLASH_ONLY="$(TSAN_TESTS:%=build-tsan/%)" \
	    sh tests/run.sh build-tsan

demo: deps $(BIN)
	@sh tools/demo.sh

# GPU tests (tests/cuda/*.c), built against the CUDA library; needs CUDA=1
CUDA_TEST_BIN := $(patsubst tests/cuda/%.c,$(BUILD)/cuda_%,$(wildcard tests/cuda/test_*.c))
$(BUILD)/cuda_test_%: tests/cuda/test_%.c $(wildcard tests/*.h) $(BUILD)/libdflash.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $@

test-cuda: deps $(BIN) $(CUDA_TEST_BIN)
	@[ "$(CUDA)" = 1 ] || { echo "test-cuda: run as make CUDA=1 test-cuda" >&2; exit 1; }
	@DFLASH_ROOT=$(CURDIR) DFLASH_CUDA_TREE=1 sh -c 'fail=0; for t in $(CUDA_TEST_BIN); do echo "== $$t"; $$t || fail=1; done; exit $$fail'

clean:
	rm -rf build build-asan build-tsan build-cuda build-fuzz build-arm64 dflash

# ---- arm64: cross-built, run under qemu-aarch64 ------------------------------
#   make cross-arm64   build-arm64/dflash, the tests and libdflash for arm64 Linux
#   make test-arm64    a subset of the tests under qemu, once per CPU model
#                      (tools/arm64/test.sh); tools/arm64/run runs the binaries
ARM64_TEST_BIN := $(TEST_BIN:$(BUILD)/%=build-arm64/%)
cross-arm64:
	@$(MAKE) --no-print-directory ARM64=1 build-arm64/.deps-ok
	@$(MAKE) --no-print-directory ARM64=1 build-arm64/dflash build-arm64/simple build-arm64/libdflash.so $(ARM64_TEST_BIN)

test-arm64: cross-arm64
	@$(MAKE) --no-print-directory ARM64=1 unpack
	@sh tools/arm64/test.sh

bench-kernels: bench/kernels_bench.c $(BUILD)/libdflash.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $(BUILD)/kernels_bench && $(BUILD)/kernels_bench

# at_run per variant, context 512 / 4096, T = 1 / 16 (Qwen3-0.6B attention shape)
bench-attn: bench/attn_bench.c $(BUILD)/libdflash.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $(BUILD)/attn_bench && $(BUILD)/attn_bench

# prompt processing: our GEMM vs OpenBLAS sgemm (apt-get install libopenblas-dev)
# on the matmuls of a model: make bench-prefill PREFILL_MODEL=DIR
PREFILL_MODEL ?= models/demo/target
bench-prefill: bench/prefill_bench.c $(BUILD)/libdflash.a $(if $(filter models/demo/%,$(PREFILL_MODEL)),$(DEMO_MODELS))
	@pkg-config --exists openblas || { echo "bench-prefill: needs libopenblas-dev" >&2; exit 1; }
	$(CC) $(CFLAGS) $$(pkg-config --cflags openblas) $< $(BUILD)/libdflash.a $(LDLIBS) $$(pkg-config --libs openblas) -o $(BUILD)/prefill_bench && $(BUILD)/prefill_bench $(PREFILL_MODEL)

# one batched forward + argmax over S sequences vs S of each (issue 24): make bench-batch
# and S draft blocks in one draft_block_multi vs S draft_block (BATCH_DRAFT)
BATCH_MODEL ?= models/demo/target
BATCH_DRAFT ?= models/demo/draft
bench-batch: bench/batch_bench.c $(BUILD)/libdflash.a $(if $(filter models/demo/%,$(BATCH_MODEL) $(BATCH_DRAFT)),$(DEMO_MODELS))
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $(BUILD)/batch_bench && $(BUILD)/batch_bench $(BATCH_MODEL) $(BATCH_DRAFT)

# time to the first token of a prompt whose long prefix another sequence holds, before
# (a fresh prefill) and after dflash_copy_prefix (issue 24): make bench-prefix
# [PREFIX_ARGS="TARGET DRAFT SHARED REPS"]
PREFIX_ARGS ?= models/demo/target models/demo/draft 500 7
bench-prefix: bench/prefix_bench.c $(BUILD)/libdflash.a $(DEMO_MODELS)
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $(BUILD)/prefix_bench && $(BUILD)/prefix_bench $(PREFIX_ARGS)

# `dflash serve` under load with the C client (issue 24; runs on the GPU machine too, where
# there is no node): make bench-serve-load [PARS="1 16" CONCS="1 4 16 32" TEMPS="0 0.8" ...]
# (bench/serve_load.sh lists the knobs)
build/serve_load: bench/serve_load.c
	@mkdir -p build
	$(CC) $(CFLAGS) $$(pkg-config --cflags libcjson) $< $$(pkg-config --libs libcjson) -pthread -o $@
bench-serve-load: build/serve_load $(BIN) $(DEMO_MODELS)
	sh bench/serve_load.sh

# resident memory per sequence / --parallel slot (issue 24): make bench-seq-mem [SEQMEM_ARGS="S CTX N"]
SEQMEM_ARGS ?= 4 1024 64
bench-seq-mem: bench/seq_mem.c $(BUILD)/libdflash.a $(DEMO_MODELS)
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $(BUILD)/seq_mem && $(BUILD)/seq_mem $(SEQMEM_ARGS)

# the draft block's cost per --draft-vocab choice, interleaved (issue 23 item 5): make bench-vocab
bench-vocab: bench/vocab_bench.c $(BUILD)/libdflash.a $(DEMO_MODELS) $(VOCAB_RANK)
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $(BUILD)/vocab_bench && \
	    $(BUILD)/vocab_bench models/demo/target models/demo/draft $(VOCAB_RANK) $(VOCAB_ARGS)

# chain vs tree rounds, interleaved per prompt (issue 23): make bench-tree
TREE_TARGET ?= models/demo/target
TREE_DRAFT ?= models/demo/draft
TREE_ARGS ?= 128 2
$(BUILD)/tree_bench: bench/tree_bench.c $(BUILD)/libdflash.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $@
bench-tree: $(BUILD)/tree_bench $(DEMO_MODELS)
	cat bench/prompts/chat.jsonl bench/prompts/code.jsonl bench/prompts/math.jsonl >$(BUILD)/tree_prompts.jsonl && \
	    $(BUILD)/tree_bench $(TREE_TARGET) $(TREE_DRAFT) $(BUILD)/tree_prompts.jsonl $(TREE_ARGS)

# a backend's verify cost curve, chain and tree, T = 1..64 (issue 23 item 4): make bench-verify
# [VERIFY_ARGS="TARGET DRAFT|- cpu|cuda|auto DEPTH REPS"] (CUDA=1 for the GPU)
VERIFY_ARGS ?= models/demo/target models/demo/draft auto 256 10
$(BUILD)/verify_curve: bench/verify_curve.c $(BUILD)/libdflash.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $@
bench-verify: $(BUILD)/verify_curve $(DEMO_MODELS)
	$(BUILD)/verify_curve $(VERIFY_ARGS)

# the exact rollback of Qwen3.5's recurrent state: make bench-rollback ROLLBACK_MODEL=DIR
# (a Qwen3.5 model, e.g. dflash synth --shape qwen3.5-0.8b --bits 4 -o DIR)
ROLLBACK_MODEL ?= tests/models/tiny-qwen35
ROLLBACK_BACKEND ?= cpu
bench-rollback: bench/rollback_bench.c $(BUILD)/libdflash.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $(BUILD)/rollback_bench && \
	    $(BUILD)/rollback_bench $(ROLLBACK_MODEL) 0 $(ROLLBACK_BACKEND)

# ---- fuzzing: libFuzzer harnesses in tests/fuzz/ (clang, ASan + UBSan) ------
#   make fuzz                 each harness for FUZZ_SECONDS (default 60); fails on a crash
#   make fuzz FUZZ_SECONDS=600 FUZZ_ONLY="tokenizer chat"
FUZZ_SECONDS ?= 60
FUZZ_BUILD ?= build-fuzz
FUZZ_CC ?= clang
FUZZ_ONLY ?= safetensors model tokenizer chat gguf reply grammar schema vocab
FUZZ_CFLAGS = -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
              -std=c11 -pthread -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iinclude -Isrc \
              $(shell pkg-config --cflags libcjson libpcre2-8 2>/dev/null)
# the library files the harnesses reach: instrumented (src/ and, _CPU, src/cpu/)
FUZZ_LIB := util weight safetensors config model tokenizer chat gguf gguf_model gguf_write reply grammar grammar_schema vocab
FUZZ_LIB_CPU := cpu cpu_pack kernels threads
# SIMD kernel variants (src/cpu/): linked (kernels.c's dispatch table), never run by a
# harness; built by $(CC) as in the normal build (clang 14 rejects a cpu
# feature name they test)
FUZZ_PLAIN := kernels_avx2 kernels_avx2q8 kernels_avxvnni kernels_avx512 kernels_vnni kernels_bf16 kernels_neon
FUZZ_OBJ := $(FUZZ_LIB:%=$(FUZZ_BUILD)/lib/%.o) $(FUZZ_LIB_CPU:%=$(FUZZ_BUILD)/lib/cpu_%.o) \
            $(FUZZ_PLAIN:%=$(FUZZ_BUILD)/plain/cpu_%.o)

$(FUZZ_BUILD)/.deps-ok:
	@mkdir -p $(FUZZ_BUILD)/lib $(FUZZ_BUILD)/plain
	@$(DEPS_SH) && sh tools/deps.sh clang && touch $@

$(FUZZ_BUILD)/lib/%.o: src/%.c $(LIB_HDR) | $(FUZZ_BUILD)/.deps-ok
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/lib/cpu_%.o: src/cpu/%.c $(LIB_HDR) | $(FUZZ_BUILD)/.deps-ok
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/plain/cpu_%.o: src/cpu/%.c $(LIB_HDR) | $(FUZZ_BUILD)/.deps-ok
	$(CC) $(CFLAGS) -c $< -o $@

$(FUZZ_BUILD)/libfuzzdeps.a: $(FUZZ_OBJ)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h $(FUZZ_BUILD)/libfuzzdeps.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_BUILD)/libfuzzdeps.a $(LDLIBS) -o $@

fuzz: $(FUZZ_ONLY:%=$(FUZZ_BUILD)/fuzz_%) $(TOKENIZER_JSON)
	@sh tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_ONLY)
