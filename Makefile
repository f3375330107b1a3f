# dflash - plain-C DFlash speculative decoding engine.
#   make          build ./dflash and libdflash.a (installs missing Debian -dev packages as root)
#   make test     run the test suite (tests/run.sh)
#   make demo     run DFlash on the shipped demo models
#   make asan     build and test with AddressSanitizer + UBSan
#   make CUDA=1   also build the CUDA backend (src/cuda/*.cu, nvcc; CUDA_ARCH=sm_90
#                 by default); make CUDA=1 test-cuda runs tests/cuda on the GPU
CC      ?= cc
WERROR  ?=
OPT     ?= -O2 -g
CFLAGS  += $(OPT) -std=c11 -Wall -Wextra -Wshadow -Wno-unused-parameter $(WERROR) -pthread \
           -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iinclude -Isrc \
           $(shell pkg-config --cflags libcjson libpcre2-8 2>/dev/null)
LDLIBS  += $(shell pkg-config --libs libcjson libpcre2-8 2>/dev/null) -lutf8proc -lm -pthread
BUILD   ?= build
ifeq ($(CUDA),1)
BUILD   := build-cuda
endif
BIN     ?= dflash

LIB_SRC := $(wildcard src/*.c)
LIB_OBJ := $(LIB_SRC:src/%.c=$(BUILD)/%.o)

# CUDA backend: objects in their own build directory (the registry in
# backend.c is compiled with -DDFLASH_CUDA there), linked against cudart.
CUDA      ?=
NVCC      ?= nvcc
CUDA_ARCH ?= sm_90
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))
NVCCFLAGS ?= -std=c++17 -O3 -arch=$(CUDA_ARCH) -lineinfo
ifeq ($(CUDA),1)
CFLAGS  += -DDFLASH_CUDA
CU_SRC  := $(wildcard src/cuda/*.cu)
LIB_OBJ += $(CU_SRC:src/cuda/%.cu=$(BUILD)/cuda_%.o)
LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++
endif
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/%)

.PHONY: all deps test demo asan clean test-cuda
all: deps $(BIN) $(BUILD)/simple

deps:
	@sh tools/deps.sh

$(BUILD):
	@mkdir -p $(BUILD)

$(BUILD)/%.o: src/%.c $(wildcard src/*.h include/*.h) | $(BUILD)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/cuda_%.o: src/cuda/%.cu $(wildcard src/cuda/*.cuh src/cuda/*.h src/*.h include/*.h) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -Isrc -Iinclude -DDFLASH_CUDA -c $< -o $@

$(BUILD)/libdflash.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

# .dflash-build names the build directory ./dflash was last linked from, so
# switching between make and make CUDA=1 relinks it.
$(shell [ "$$(cat .dflash-build 2>/dev/null)" = "$(BUILD)" ] || echo "$(BUILD)" > .dflash-build)
$(BIN): cli/main.c $(BUILD)/libdflash.a .dflash-build
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $@

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

# GPU tests (tests/cuda/*.c), built against the CUDA library; needs CUDA=1
CUDA_TEST_BIN := $(patsubst tests/cuda/%.c,$(BUILD)/cuda_%,$(wildcard tests/cuda/test_*.c))
$(BUILD)/cuda_test_%: tests/cuda/test_%.c tests/check.h $(BUILD)/libdflash.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $@

test-cuda: deps $(BIN) $(CUDA_TEST_BIN)
	@[ "$(CUDA)" = 1 ] || { echo "test-cuda: run as make CUDA=1 test-cuda" >&2; exit 1; }
	@DFLASH_ROOT=$(CURDIR) sh -c 'fail=0; for t in $(CUDA_TEST_BIN); do echo "== $$t"; $$t || fail=1; done; exit $$fail'

clean:
	rm -rf build build-asan build-cuda dflash

bench-kernels: bench/kernels_bench.c $(BUILD)/libdflash.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdflash.a $(LDLIBS) -o $(BUILD)/kernels_bench && $(BUILD)/kernels_bench

# prompt processing: our GEMM vs OpenBLAS sgemm (apt-get install libopenblas-dev)
# on the matmuls of a model: make bench-prefill PREFILL_MODEL=DIR
PREFILL_MODEL ?= models/demo/target
bench-prefill: bench/prefill_bench.c $(BUILD)/libdflash.a
	@pkg-config --exists openblas || { echo "bench-prefill: needs libopenblas-dev" >&2; exit 1; }
	$(CC) $(CFLAGS) $$(pkg-config --cflags openblas) $< $(BUILD)/libdflash.a $(LDLIBS) $$(pkg-config --libs openblas) -o $(BUILD)/prefill_bench && $(BUILD)/prefill_bench $(PREFILL_MODEL)
