# dptrain: data-parallel training with MPI. Plain GNU make; objects in build/.
#   make          build build/dptrain and the tools (run `make deps` first on a new machine)
#   make run      install deps, build, train a small GPT on 2 ranks on the project's own docs,
#                 generate a sample from its checkpoint, plot the run
#   make run-mlp  the same for the MLP on a synthetic dataset
#   make test     install deps, build, run every test
#   make install  install the programs, man pages, bash completion, configs and Slurm scripts
#                 under PREFIX (default /usr/local), staged under DESTDIR when set; make uninstall
#   make deps     install the Debian packages that building and running need (as root)
#   make test-deps  and those the tests need besides
# Settings (override on the command line): CUDA=auto|0|1, CUDA_HOME, NVCC_ARCH, DEBUG=0|1,
# VERBOSE=0|1, ARCH_FLAGS, NP (ranks for make run), PREFIX, DESTDIR.

CXX        ?= g++
CUDA       ?= auto
CUDA_HOME  ?= /usr/local/cuda
# Ampere and Hopper machine code, plus compute_90 PTX that newer GPUs can JIT-compile.
NVCC_ARCH  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
              -gencode arch=compute_90,code=compute_90
DEBUG      ?= 0
VERBOSE    ?= 0
ARCH_FLAGS ?= -march=native
NP         ?= 2

ifeq ($(filter $(CUDA),auto 0 1),)
$(error CUDA=$(CUDA) is not valid: use CUDA=auto, CUDA=0 or CUDA=1)
endif
ifeq ($(filter $(DEBUG),0 1),)
$(error DEBUG=$(DEBUG) is not valid: use DEBUG=0 or DEBUG=1)
endif

.DEFAULT_GOAL := all
BUILD  := build
CONFIG := $(BUILD)/config.mk
Q      := $(if $(filter 1,$(VERBOSE)),,@)
# mpirun as root needs the flag; --oversubscribe lets a small machine run more ranks than cores.
MPIRUN := mpirun $(if $(filter 0,$(shell id -u)),--allow-run-as-root) --oversubscribe

# Goals that must work before the libraries are installed do not read the configuration.
NO_CONFIG := deps test-deps run test clean help fuzz
ifneq ($(filter-out $(NO_CONFIG),$(or $(MAKECMDGOALS),all)),)
include $(CONFIG)
endif

# Re-detect when the detection script, this Makefile or CUDA= change.
$(CONFIG): scripts/configure Makefile $(BUILD)/.cuda-$(CUDA)
	@echo "configure (CUDA=$(CUDA)):"
	$(Q)CXX="$(CXX)" CUDA=$(CUDA) CUDA_HOME=$(CUDA_HOME) scripts/configure $@
$(BUILD)/.cuda-$(CUDA):
	$(Q)mkdir -p $(BUILD) && rm -f $(BUILD)/.cuda-* && touch $@

SAN      := -fsanitize=address,undefined
# cuBLAS is not linked: src/backend/cuda/cublas_library.cpp opens it when the first CUDA context is
# made (the run path below is where it looks after LD_LIBRARY_PATH).
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart
OPT      := $(if $(filter 1,$(DEBUG)),-O0 -g $(SAN),-O3 -g $(ARCH_FLAGS))
VERSION  := $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.1.0)
# The objects that print the version are rebuilt when it changes (a commit; a tree made clean or
# dirty): an incremental build printed the version of the build that first compiled them. The
# stamp is rewritten only when the version differs.
VERSION_STAMP := $(BUILD)/version-stamp
ifneq ($(VERSION),$(shell cat $(VERSION_STAMP) 2>/dev/null))
$(shell mkdir -p $(BUILD) && echo '$(VERSION)' > $(VERSION_STAMP))
endif
VERSION_USERS := $(shell grep -rl --include='*.cpp' DPTRAIN_VERSION src)
CPPFLAGS := -Iinclude -DOMPI_SKIP_MPICXX=1 $(MPI_CFLAGS) $(HDF5_CFLAGS) $(HTTPLIB_CFLAGS) $(PCRE_CFLAGS) -DDPTRAIN_VERSION='"$(VERSION)"' \
            $(if $(filter 1,$(HAVE_CUDA)),-DDPTRAIN_HAVE_CUDA -I$(CUDA_HOME)/include) \
            $(if $(filter 1,$(HAVE_NCCL)),-DDPTRAIN_HAVE_NCCL)
CXXFLAGS := -std=c++17 $(OPT) -fno-math-errno -fno-trapping-math -fopenmp -Wall -Wextra -MMD -MP
LDLIBS   := $(HDF5_LIBS) -lboost_program_options $(BLAS_LIBS) $(FABRIC_LIBS) $(MPI_LIBS) $(HTTPLIB_LIBS) $(PCRE_LIBS) $(SP_LIBS) -lcrypto -lz \
            -fopenmp -lpthread \
            $(if $(filter 1,$(HAVE_CUDA)),$(CUDA_LIBS)) \
            $(if $(filter 1,$(HAVE_NCCL)),-lnccl)
LDFLAGS  := $(if $(filter 1,$(DEBUG)),$(SAN))

# The library: one folder per layer (docs/ARCHITECTURE.md). The device factory is chosen here, at
# link time: src/backend/cuda/ defines it when CUDA is found, src/backend/no_cuda.cpp otherwise.
LAYERS   := core config comm data model io train infer app backend backend/cpu
LIB_SRCS := $(foreach d,$(LAYERS),$(wildcard src/$(d)/*.cpp))
# NCCL likewise: src/comm/nccl.cpp where it is found, src/comm/no_nccl.cpp in a CUDA build without it.
NO_CUDA  := src/backend/no_cuda.cpp src/backend/no_cuda_decoders.cpp
LIB_SRCS := $(filter-out src/app/main.cpp src/app/serve_main.cpp src/comm/nccl.cpp src/comm/no_nccl.cpp $(NO_CUDA),$(LIB_SRCS)) \
            $(if $(filter 1,$(HAVE_CUDA)),$(if $(filter 1,$(HAVE_NCCL)),src/comm/nccl.cpp,src/comm/no_nccl.cpp)) \
            $(if $(filter 1,$(HAVE_CUDA)),$(wildcard src/backend/cuda/*.cpp),$(NO_CUDA))
# The CUDA backend's kernels (.cu) join the library when CUDA is found.
CUDA_SRCS := $(if $(filter 1,$(HAVE_CUDA)),$(wildcard src/backend/cuda/*.cu))
LIB_OBJS := $(LIB_SRCS:%.cpp=$(BUILD)/%.o) $(CUDA_SRCS:%.cu=$(BUILD)/%.o)
LIB      := $(BUILD)/libdptrain.a
# What only the tools use (JSON, charts, .npy/.npz, ingest) is a library of its own.
TOOLS_LIB := $(BUILD)/libdptrain-tools.a
TOOLS_LIB_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard src/tools/lib/*.cpp))
TOOLS_LDLIBS := -lzip $(CAIRO_LIBS)
# The charts draw with cairo and pango (their headers come with glib's).
$(BUILD)/src/tools/lib/plot_cairo.o $(BUILD)/tests/unit/test_plot.o: CPPFLAGS += $(CAIRO_CFLAGS)
# A decoded row's bits must not depend on the rows beside it (matmul_rows.cpp): the compiler may
# fuse a multiply and an add into one FMA in one inlined copy of a loop and not in another, so
# it fuses none there (the vector lanes' FMAs are written out).
$(BUILD)/src/backend/cpu/matmul_rows.o: CXXFLAGS += -ffp-contract=off
TOOLS    := $(BUILD)/dptrain-data $(BUILD)/dptrain-bench $(BUILD)/dptrain-ckpt $(BUILD)/dptrain-report
UNIT_SRCS := $(wildcard tests/unit/*.cpp)
MPI_SRCS  := $(wildcard tests/mpi/*.cpp)
CUDA_TEST_SRCS := $(wildcard tests/cuda/*.cpp)
# The test programs' own code (Catch2's runner, set-up, references, checks) is not what is
# measured: -O1 without debug information compiles it 3 to 4 times faster than -O3 -g. The library
# they test is built as always. (DEBUG=1 builds them like everything else, for a debugger.)
CATCH_MAIN := $(BUILD)/tests/catch_main.o
TEST_OPT   := $(if $(filter 0,$(DEBUG)),-O1 -g0)
$(BUILD)/tests/%.o: CXXFLAGS += $(TEST_OPT)
TESTS    := $(BUILD)/unit_tests $(BUILD)/mpi_tests $(if $(filter 1,$(HAVE_CUDA)),$(BUILD)/cuda_tests)

.PHONY: all deps test-deps run run-mlp install uninstall test clean help tests no-catch2 fuzz fuzz-run fuzzers bench-cluster
# Objects reached through pattern rules (the tools, the fuzz targets) are kept, not deleted as
# intermediates (make names each pattern rule's own target pattern here).
.PRECIOUS: $(BUILD)/%.o $(BUILD)/fuzz/%.o
all: $(BUILD)/dptrain $(BUILD)/dptrain-serve $(TOOLS)
# The tests need Catch2, which only make test-deps installs.
tests: $(if $(filter 0,$(HAVE_CATCH2)),no-catch2,$(TESTS))
no-catch2:
	$(error the tests need Catch2: run 'make test-deps' (as root), then build again)

$(BUILD)/%.o: %.cpp $(CONFIG)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CXX   $<")
	$(Q)$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(VERSION_USERS:%.cpp=$(BUILD)/%.o): $(VERSION_STAMP)

$(LIB): $(LIB_OBJS)
	@$(if $(Q),echo "  AR    $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(TOOLS_LIB): $(TOOLS_LIB_OBJS)
	@$(if $(Q),echo "  AR    $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/dptrain: $(BUILD)/src/app/main.o $(LIB)
	@$(if $(Q),echo "  LINK  $@")
	$(Q)$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# dptrain-serve: the server without MPI. Its two readers of HDF5 (the checkpoint and its helpers)
# are compiled again against the serial HDF5 and linked before the library, so the archive's
# parallel ones are never taken; nothing on its link line brings MPI, so an MPI symbol reached
# by mistake fails the link.
SERIAL_H5_OBJS := $(BUILD)/serial/src/data/h5.o $(BUILD)/serial/src/io/checkpoint.o
$(BUILD)/serial/%.o: %.cpp $(CONFIG)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CXX   $< (serial HDF5)")
	$(Q)$(CXX) -Iinclude $(HDF5_SERIAL_CFLAGS) $(CXXFLAGS) -c $< -o $@
SERVE_LDLIBS := $(HDF5_SERIAL_LIBS) -lboost_program_options $(BLAS_LIBS) $(HTTPLIB_LIBS) $(PCRE_LIBS) $(SP_LIBS) \
                -lcrypto -lz -fopenmp -lpthread $(if $(filter 1,$(HAVE_CUDA)),$(CUDA_LIBS))
$(BUILD)/dptrain-serve: $(BUILD)/src/app/serve_main.o $(SERIAL_H5_OBJS) $(LIB)
	@$(if $(Q),echo "  LINK  $@")
	$(Q)$(CXX) $(LDFLAGS) $^ -o $@ $(SERVE_LDLIBS)

$(BUILD)/dptrain-%: $(BUILD)/src/tools/dptrain_%.o $(TOOLS_LIB) $(LIB)
	@$(if $(Q),echo "  LINK  $@")
	$(Q)$(CXX) $(LDFLAGS) $^ -o $@ $(TOOLS_LDLIBS) $(LDLIBS)

$(BUILD)/unit_tests: $(CATCH_MAIN) $(UNIT_SRCS:%.cpp=$(BUILD)/%.o) $(TOOLS_LIB) $(LIB)
	@$(if $(Q),echo "  LINK  $@")
	$(Q)$(CXX) $(LDFLAGS) $^ -o $@ $(TOOLS_LDLIBS) $(LDLIBS)

$(BUILD)/mpi_tests: $(MPI_SRCS:%.cpp=$(BUILD)/%.o) $(LIB)
	@$(if $(Q),echo "  LINK  $@")
	$(Q)$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

ifeq ($(HAVE_CUDA),1)
# Kernels: sm_80/sm_90 machine code (NVCC_ARCH); host-side warnings on as for the C++ sources.
NVCCFLAGS := -std=c++17 -O3 -lineinfo $(NVCC_ARCH) -Iinclude -Xcompiler -Wall,-Wextra -MMD -MP
$(BUILD)/src/backend/cuda/%.o: src/backend/cuda/%.cu $(CONFIG)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC  $<")
	$(Q)$(CUDA_HOME)/bin/nvcc $(NVCCFLAGS) -MF $(@:.o=.d) -c $< -o $@

# CUDA ops against their CPU twins; without a GPU every case prints SKIPPED and passes.
$(BUILD)/cuda_tests: $(CATCH_MAIN) $(CUDA_TEST_SRCS:%.cpp=$(BUILD)/%.o) $(LIB)
	@$(if $(Q),echo "  LINK  $@")
	$(Q)$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)
endif

# libFuzzer targets (clang): the option parser, the shard, checkpoint, SHA256SUMS and safetensors
# readers, and the readers of users' files the tools have (JSON lines, CSV, .npy, .npz, Chrome
# traces, GPT-2's tokenizer files, SentencePiece models), built with ASan over the library sources they exercise. `make test` runs each for a fixed number of inputs from
# tests/fuzz/corpus (deterministic: -seed=1); `make fuzz` runs each for FUZZ_SECONDS. Line tables
# are all the debug information ASan's reports use (file:line in each frame).
FUZZ_SECONDS ?= 120
FUZZ_SRCS    := src/core/error.cpp src/core/fatal.cpp src/core/checksum.cpp src/core/bf16.cpp src/core/files.cpp \
                src/core/json.cpp src/config/options.cpp src/config/choices.cpp src/config/option_checks.cpp \
                src/comm/communicator.cpp src/comm/shared_window.cpp src/data/h5.cpp src/data/shards.cpp src/data/shard_reads.cpp \
                src/data/stage.cpp src/data/stage_sums.cpp src/io/checkpoint.cpp src/io/checkpoint_dir.cpp src/io/promotion.cpp src/tools/lib/json.cpp src/tools/lib/ingest.cpp src/tools/lib/npy.cpp \
                src/tools/lib/zip.cpp src/tools/lib/trace_merge.cpp src/tools/lib/token_files.cpp src/io/safetensors.cpp \
                src/data/bpe.cpp src/data/bpe_json.cpp src/data/sentencepiece.cpp src/core/utf8.cpp src/model/llama_config.cpp
FUZZ_FLAGS   := -std=c++17 -gline-tables-only -O1 -MMD -MP -fsanitize=fuzzer-no-link,address -Iinclude -DOMPI_SKIP_MPICXX=1 \
                $(MPI_CFLAGS) $(HDF5_CFLAGS)
FUZZ_NAMES   := options shard checkpoint jsonl csv npy npz trace sums tokens safetensors gpt2 bpe_json sentencepiece
FUZZERS      := $(if $(filter 1,$(HAVE_FUZZ)),$(addprefix $(BUILD)/fuzz/fuzz_,$(FUZZ_NAMES)))

$(BUILD)/fuzz/%.o: %.cpp $(CONFIG)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CLANG $<")
	$(Q)clang++ $(FUZZ_FLAGS) -c $< -o $@

$(BUILD)/fuzz/fuzz_%: $(BUILD)/fuzz/tests/fuzz/fuzz_%.o $(FUZZ_SRCS:%.cpp=$(BUILD)/fuzz/%.o)
	@$(if $(Q),echo "  LINK  $@")
	$(Q)clang++ -fsanitize=fuzzer,address $^ -o $@ $(HDF5_LIBS) -lboost_program_options $(MPI_LIBS) -lzip -lcrypto $(PCRE_LIBS) $(SP_LIBS) -lpthread

fuzzers: $(FUZZERS)

# fuzz reads no configuration (it installs the test packages first), so the list of fuzzers is
# fuzz-run's, made after them: run from fuzz itself, the list was empty and nothing was fuzzed.
fuzz: test-deps
	@$(MAKE) --no-print-directory $(JOBS) fuzzers
	@$(MAKE) --no-print-directory fuzz-run

fuzz-run:
	@[ -n "$(FUZZERS)" ] || { echo "fuzz: no libFuzzer (clang) in this build: apt-get install clang"; exit 1; }
	@for f in $(FUZZERS); do n=$$(basename $$f); mkdir -p $(BUILD)/fuzz/corpus-$$n; \
	  echo "$$n: $(FUZZ_SECONDS) s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -artifact_prefix=$(BUILD)/fuzz/ \
	    $(BUILD)/fuzz/corpus-$$n tests/fuzz/corpus/$${n#fuzz_} || exit 1; done

# The emulated-cluster benchmarks (root): 2 x 2 and 4 x 1 nodes on shaped links.
bench-cluster: all
	bench/cluster_allreduce.sh $(RATE)
RATE ?= 100mbit

deps:
	@scripts/install-deps

test-deps:
	@scripts/install-deps --test

# The default dataset: 128k training samples in 4 shards + 8k validation, made once.
data/synth/val-00000-of-00001.h5: | $(BUILD)/dptrain-data
	$(BUILD)/dptrain-data synth --out data/synth

JOBS := -j$(shell nproc 2>/dev/null || echo 2)

# The default text: the project's documentation, character-level; remade when the docs change.
DOC_TEXT := README.md $(sort $(wildcard docs/*.md))
data/docs/val-00000-of-00001.h5: $(DOC_TEXT) | $(BUILD)/dptrain-data
	@mkdir -p $(BUILD)
	cat $(DOC_TEXT) >$(BUILD)/docs.txt
	$(BUILD)/dptrain-data text --input $(BUILD)/docs.txt --out data/docs --tokenizer char --overwrite

run: deps
	@$(MAKE) --no-print-directory $(JOBS) all data/docs/val-00000-of-00001.h5
	$(MPIRUN) -np $(NP) $(BUILD)/dptrain --config configs/gpt-docs.ini --overwrite-checkpoints
	$(BUILD)/dptrain generate --checkpoint runs/gpt --prompt "The " --tokens 300 --temperature 0.8 --top-k 20
	$(BUILD)/dptrain-report plot runs/gpt

run-mlp: deps
	@$(MAKE) --no-print-directory $(JOBS) all data/synth/val-00000-of-00001.h5
	$(MPIRUN) -np $(NP) $(BUILD)/dptrain --config configs/local.ini --overwrite-checkpoints
	$(BUILD)/dptrain-report plot runs/local

empty :=
space := $(empty) $(empty)
comma := ,

# make install: what `make` built, where packages put such files.
PREFIX   ?= /usr/local
DESTDIR  ?=
PROGRAMS := dptrain dptrain-serve dptrain-data dptrain-bench dptrain-ckpt dptrain-report
BINDIR   := $(DESTDIR)$(PREFIX)/bin
MANDIR   := $(DESTDIR)$(PREFIX)/share/man/man1
COMPDIR  := $(DESTDIR)$(PREFIX)/share/bash-completion/completions
SHAREDIR := $(DESTDIR)$(PREFIX)/share/dptrain
DOCDIR   := $(DESTDIR)$(PREFIX)/share/doc/dptrain

install: all
	@scripts/make-man $(BUILD) $(BUILD)/man
	install -d $(BINDIR) $(MANDIR) $(COMPDIR) $(SHAREDIR)/configs $(SHAREDIR)/slurm $(DOCDIR)
	install -m 755 $(PROGRAMS:%=$(BUILD)/%) scripts/dptrain-run scripts/dptrain-elastic $(BINDIR)
	install -m 644 $(PROGRAMS:%=$(BUILD)/man/%.1) $(BUILD)/man/dptrain-run.1 $(BUILD)/man/dptrain-elastic.1 $(MANDIR)
	for p in $(PROGRAMS); do install -m 644 scripts/dptrain.bash-completion $(COMPDIR)/$$p || exit 1; done
	install -m 644 configs/*.ini $(SHAREDIR)/configs
	install -m 755 slurm/*.sbatch slurm/*.sh $(SHAREDIR)/slurm
	install -m 644 README.md docs/*.md $(DOCDIR)
	install -m 644 data/README.md $(DOCDIR)/DATA.md
	@echo "installed dptrain $(VERSION) under $(DESTDIR)$(PREFIX): bin/{$(subst $(space),$(comma),$(PROGRAMS))}, share/man/man1, share/bash-completion, share/dptrain/{configs,slurm}, share/doc/dptrain"

uninstall:
	rm -f $(PROGRAMS:%=$(BINDIR)/%) $(BINDIR)/dptrain-run $(BINDIR)/dptrain-elastic $(PROGRAMS:%=$(MANDIR)/%.1) \
	      $(MANDIR)/dptrain-run.1 $(MANDIR)/dptrain-elastic.1 \
	      $(PROGRAMS:%=$(COMPDIR)/%)
	rm -rf $(SHAREDIR) $(DOCDIR)

test: test-deps
	@$(MAKE) --no-print-directory $(JOBS) all tests fuzzers
	@MPIRUN="$(MPIRUN)" tests/run_all.sh

clean:
	rm -rf $(BUILD)

help:
	@sed -n '1,/^$$/p' Makefile | sed 's/^# \{0,1\}//'

-include $(shell find $(BUILD) -name '*.d' -type f -not -path '$(BUILD)/gpu-*' 2>/dev/null)
