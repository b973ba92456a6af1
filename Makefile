# dtrain: one Makefile for the library, the CLI, the tests and the benchmarks.
#   make            build build/libdtrain.a, build/libdtrain.so and build/dtrain
#   make demo       train the tutorial CNN on Fashion-MNIST with two workers
#   make test       every test; the last line reads "N passed, N failed"
#   make asan       the tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make tsan       the multi-threaded tests under ThreadSanitizer
#   make cross      the library and the CLI built for aarch64
#   make leakcheck  a short training run under valgrind
#   make bench      speed and memory against the peers, in one run
#   make fuzz       every fuzz target for FUZZ_SECONDS (default 60) each
#   make install PREFIX=/usr/local
# Each target first installs the Debian packages it is missing (scripts/deps.sh).

CC ?= cc
PREFIX ?= /usr/local
BUILD ?= build
WERROR ?= 0
SAN ?= 0

CFLAGS := -std=c11 -O2 -Wall -Wextra -D_GNU_SOURCE -fno-math-errno -pthread -fPIC -Iinclude
ifeq ($(WERROR),1)
CFLAGS += -Werror
endif
ifeq ($(SAN),1)
CFLAGS := $(filter-out -O2,$(CFLAGS)) -O1 -g -fno-omit-frame-pointer \
	-fsanitize=address,undefined -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(SAN),thread)
CFLAGS := $(filter-out -O2,$(CFLAGS)) -O1 -g -fno-omit-frame-pointer -fsanitize=thread
LDFLAGS += -fsanitize=thread
endif
LDLIBS := -lopenblas -lcjson -lz -lcrypto -lzmq -lprotobuf-c -lm -pthread
# The shared library's version: programs link against the SONAME (its major number), which
# changes only when the ABI does.
VERSION := 0.1.0
SOVERSION := 0

LIB_SRCS := $(sort $(wildcard src/*/*.c))
# The AVX2 and AVX-512 kernels exist on x86-64 only; elsewhere the portable code runs (make cross).
X86_ONLY_SRCS := src/nn/convpool_avx2.c src/nn/dense_sparse_avx512.c src/nn/gemm_avx512.c \
	src/optim/optim_avx2.c
# The compiler's target, or this machine's when there is no compiler yet (a bare machine, before
# make installs one).
TARGET_MACHINE := $(or $(shell $(CC) -dumpmachine 2> /dev/null),$(shell uname -m))
ifeq ($(filter x86_64%,$(TARGET_MACHINE)),)
LIB_SRCS := $(filter-out $(X86_ONLY_SRCS),$(LIB_SRCS))
endif
CLI_SRCS := $(sort $(wildcard cli/*.c))
TEST_SRCS := $(sort $(wildcard tests/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)
# ONNX's schema (Debian's libonnx-dev) compiled to C by protoc-c into the build directory; the
# ONNX exporter (src/serve/) writes models through it, and it goes into libdtrain.
ONNX_PROTO ?= /usr/include/onnx/onnx.proto
GEN := $(BUILD)/gen
LIB_OBJS += $(GEN)/onnx.pb-c.o
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/%.o)
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/%.o)

# The only code built for AVX2 (+ FMA) or AVX-512; it runs only after a CPU check.
$(BUILD)/src/nn/convpool_avx2.o: ARCH_FLAGS := -mavx2 -mfma
$(BUILD)/src/optim/optim_avx2.o: ARCH_FLAGS := -mavx2
$(BUILD)/src/nn/gemm_avx512.o $(BUILD)/src/nn/dense_sparse_avx512.o: ARCH_FLAGS := -mavx512f -mfma
# The CTR kernels' loops over K floats, and the layers' element-wise passes (activations,
# dropout, bias sums, the CTR batch copy), vectorise at -O3 (IEEE semantics kept: no
# reassociation, so the results are the same bit for bit).
$(BUILD)/src/nn/fm.o $(BUILD)/src/nn/embedding.o $(BUILD)/src/optim/rowwise.o: ARCH_FLAGS := -O3
$(BUILD)/src/nn/nn.o $(BUILD)/src/model/ctr.o $(BUILD)/src/nn/dense_sparse.o: ARCH_FLAGS := -O3
$(BUILD)/src/model/cols.o $(BUILD)/src/nn/cross.o: ARCH_FLAGS := -O3

.PHONY: all demo test asan test-large tsan cross leakcheck bench install clean unit-tests fuzz fuzz-build image image-test
.PRECIOUS: $(BUILD)/.deps-%
all: $(BUILD)/libdtrain.a $(BUILD)/libdtrain.so $(BUILD)/dtrain $(BUILD)/libdtrain_mpi.so

$(BUILD)/.deps-%: deps/packages.txt scripts/deps.sh
	@mkdir -p $(BUILD)
	bash scripts/deps.sh build $*
	@touch $@

$(BUILD)/%.o: %.c | $(BUILD)/.deps-build
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ARCH_FLAGS) -MMD -MP -c $< -o $@

$(GEN)/onnx.pb-c.c: $(ONNX_PROTO) | $(BUILD)/.deps-build
	@mkdir -p $(GEN)
	protoc-c --c_out=$(GEN) --proto_path=$(dir $(ONNX_PROTO)) $(ONNX_PROTO)
$(GEN)/onnx.pb-c.h: $(GEN)/onnx.pb-c.c
$(GEN)/onnx.pb-c.o: $(GEN)/onnx.pb-c.c $(GEN)/onnx.pb-c.h
	$(CC) $(CFLAGS) -I$(GEN) -c $< -o $@
$(patsubst %.c,$(BUILD)/%.o,$(wildcard src/serve/onnx*.c)): $(GEN)/onnx.pb-c.h
$(patsubst %.c,$(BUILD)/%.o,$(wildcard src/serve/onnx*.c)): CFLAGS += -I$(GEN)

# The library's objects (in libdtrain.a and libdtrain.so alike) keep their symbols hidden: the
# shared library exports only what a public header declares DT_API (include/dtrain/api.h), which
# tests/exports.sh checks. Programs linked with libdtrain.a (the CLI, the tests, the
# benchmarks) still reach every function, hidden or not. An object older than api.h may have
# been built without the flag: it is built again.
$(LIB_OBJS): CFLAGS += -fvisibility=hidden
$(LIB_OBJS): include/dtrain/api.h

$(BUILD)/libdtrain.a: $(LIB_OBJS)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/libdtrain.so: $(LIB_OBJS)
	$(CC) -shared -Wl,-soname,libdtrain.so.$(SOVERSION) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/dtrain: $(CLI_OBJS) $(BUILD)/libdtrain.a
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJS) $(BUILD)/libdtrain.a $(LDLIBS)

$(BUILD)/tests/unit: $(TEST_OBJS) $(BUILD)/libdtrain.a
	$(CC) $(LDFLAGS) -o $@ $(TEST_OBJS) $(BUILD)/libdtrain.a $(LDLIBS)

# --- mpi communicator (begin) ---
# The MPI plugin, the only code that links libmpi: src/coll/mpi.c loads it when a program asks for
# the mpi communicator. It carries its own copies of the conversions (comm.c) and of the error
# messages (status.c), with hidden visibility (DT_API defined empty, so that the public headers'
# DT_API does not export those copies from the plugin too). Without mpicc it is skipped with a note, and the
# mpi communicator then reports that the plugin is missing.
MPICC ?= mpicc
MPI_PLUGIN_SRCS := mpi/dt_mpi_plugin.c src/coll/comm.c src/core/status.c
$(BUILD)/libdtrain_mpi.so: $(MPI_PLUGIN_SRCS) include/dtrain/api.h include/dtrain/comm.h \
		include/dtrain/status.h | $(BUILD)/.deps-build
	@if command -v $(MPICC) > /dev/null; then \
		echo "$(MPICC) -shared -fvisibility=hidden -DDT_API= -o $@ $(MPI_PLUGIN_SRCS)"; \
		$(MPICC) $(CFLAGS) -fvisibility=hidden -DDT_API= -shared $(LDFLAGS) -o $@ $(MPI_PLUGIN_SRCS) -lm; \
	else \
		echo "note: $(MPICC) not found: skipping $@ (the mpi communicator)"; \
	fi

# Every collective at awkward counts on one communicator (tests/mpi.sh runs it under mpirun); not
# part of the unit binary.
$(BUILD)/tests/coll_check: tests/progs/coll_check.c $(BUILD)/libdtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libdtrain.a $(LDLIBS)
# --- mpi communicator (end) ---

$(BUILD)/bench/%: bench/%.c $(BUILD)/libdtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libdtrain.a $(LDLIBS)

unit-tests: all $(BUILD)/tests/unit $(BUILD)/tests/coll_check $(BUILD)/tests/ps_check \
	$(BUILD)/tests/farmhash_judge

# FarmHash's own Fingerprint64 (Debian's libfarmhash), the independent judge that
# tests/test_fingerprint.c compares src/features/fingerprint.c with. A C++ program outside the
# library, so it is built without the sanitizers even when SAN=1.
CXX ?= g++
JUDGE_CXXFLAGS := -std=c++11 -O2 -Wall -Wextra $(if $(filter 1,$(WERROR)),-Werror)
$(BUILD)/tests/farmhash_judge: tests/progs/farmhash_judge.cc | $(BUILD)/.deps-test
	@mkdir -p $(dir $@)
	$(CXX) $(JUDGE_CXXFLAGS) -o $@ $< -lfarmhash

# The chief's side of a ps cluster against dtrain server tasks (tests/ps.sh).
$(BUILD)/tests/ps_check: tests/progs/ps_check.c $(BUILD)/libdtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libdtrain.a $(LDLIBS)

# TensorFlow's multi-worker tutorial on dtrain: two workers on this machine train the tutorial
# CNN with multi_worker_mirrored (global batch 64, 32 per worker), the chief reporting.
demo: $(BUILD)/.deps-demo all
	$(BUILD)/dtrain launch -n 2 -- $(BUILD)/dtrain train --model mnist_cnn --data fashion-mnist \
		--epochs 2 --batch-size 64 --optimizer adam --lr 0.001 --seed 1 --threads 1

test: $(BUILD)/.deps-test unit-tests fuzz-build
	bash tests/run.sh $(BUILD)

asan:
	$(MAKE) BUILD=build-asan SAN=1 test

# What needs more memory and disk than the suite may take: a 2 GiB ps shard read back and
# restored (tests/ps_large.sh; about 10 GB of memory, 5 GB under /tmp).
test-large: all
	@c=$$(mktemp); bash tests/ps_large.sh $(BUILD) $$c; read -r p f < $$c; rm -f $$c; \
		echo "$$p passed, $$f failed"; [ "$$f" -eq 0 ]

# The library and the CLI compiled and linked for aarch64 with Debian's cross compiler and arm64
# libraries (scripts/cross_deps.sh installs them), then run under qemu-aarch64 for 20 training
# steps: what keeps the code portable. No per-file x86 flags there; the MPI plugin (mpicc is the
# host's) is left out.
CROSS_CC ?= aarch64-linux-gnu-gcc
cross: $(BUILD)/.deps-demo
	bash scripts/cross_deps.sh
	$(MAKE) BUILD=build-cross CC=$(CROSS_CC) ARCH_FLAGS= WERROR=1 build-cross/libdtrain.a \
		build-cross/libdtrain.so build-cross/dtrain
	file build-cross/dtrain | grep -q aarch64
	qemu-aarch64 build-cross/dtrain --version
	qemu-aarch64 build-cross/dtrain train --model mlp --data fashion-mnist --max-steps 20 \
		--test-data none --progress none
	@echo "cross: build-cross/dtrain is an aarch64 program, and trains under qemu-aarch64"

# The unit tests of code that several threads run at once, under ThreadSanitizer: the predictor
# scored from two threads at once (tests/test_predict.c).
TSAN_TESTS ?= predict
tsan:
	$(MAKE) BUILD=build-tsan SAN=thread $(if $(filter 1,$(WERROR)),WERROR=1) build-tsan/tests/unit
	for t in $(TSAN_TESTS); do \
		TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/unit $$t || exit 1; done

leakcheck: $(BUILD)/.deps-leakcheck all
	bash tests/leakcheck.sh $(BUILD)

bench: $(BUILD)/.deps-bench all $(BUILD)/bench/conv_bench $(BUILD)/bench/input_bench $(BUILD)/bench/gemm_bench
	bash bench/run.sh $(BUILD)
	bash bench/input.sh $(BUILD)
	bash bench/checkpoint.sh $(BUILD)

# libFuzzer targets (fuzz/fuzz_*.c) over the readers and parsers, built by clang with ASan and
# UBSan from the core and data sources, the transport's wire formats and the ps messages and
# their MAC'd framing. tests/fuzz.sh runs them;
# make test runs a short smoke pass.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS := -std=c11 -g -O1 -D_GNU_SOURCE -Iinclude -pthread \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_LIB_SRCS := $(sort $(wildcard src/core/*.c src/data/*.c src/features/*.c src/tables/*.c)) src/net/wire.c \
	src/net/session.c src/net/sock.c src/ps/psmsg.c src/ps/psconn.c src/model/dynamic_json.c
FUZZ_BINS := $(patsubst fuzz/%.c,$(BUILD)/fuzz/%,$(sort $(wildcard fuzz/fuzz_*.c)))

$(BUILD)/fuzz/%: fuzz/%.c fuzz/fuzz.h $(FUZZ_LIB_SRCS) | $(BUILD)/.deps-build $(BUILD)/.deps-test
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_LIB_SRCS) -lcjson -lz -lcrypto -lm

fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	bash tests/fuzz.sh $(BUILD) $(FUZZ_SECONDS)

# libdtrain.so.VERSION with its SONAME and development links, the MPI plugin beside it (where
# the mpi communicator looks first, see src/coll/mpi.c), the headers, the CLI and dtrain.pc.
# An OCI image of dtrain without Docker (scripts/make_image.sh: debootstrap, umoci; root and the
# Debian archive), written to $(BUILD)/dtrain-image.oci.tar; image-test runs it unpacked.
image: all
	bash scripts/make_image.sh $(BUILD)

image-test: image
	bash scripts/image_test.sh $(BUILD)

install: all
	install -d $(DESTDIR)$(PREFIX)/include/dtrain $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/dtrain/*.h $(DESTDIR)$(PREFIX)/include/dtrain/
	install -m 644 $(BUILD)/libdtrain.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libdtrain.so $(DESTDIR)$(PREFIX)/lib/libdtrain.so.$(VERSION)
	ln -sf libdtrain.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libdtrain.so.$(SOVERSION)
	ln -sf libdtrain.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libdtrain.so
	if [ -f $(BUILD)/libdtrain_mpi.so ]; then \
		install -m 755 $(BUILD)/libdtrain_mpi.so $(DESTDIR)$(PREFIX)/lib/; fi
	install -m 755 $(BUILD)/dtrain $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' dtrain.pc.in \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/dtrain.pc

clean:
	rm -rf build build-asan build-tsan build-cross

-include $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(TEST_OBJS:.o=.d)
