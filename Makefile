# Build, test and run the Go ps-lite.
#   make deps    install the system packages the build needs (libzmq, pkg-config, protoc)
#   make build   all programs into build/
#   make check   the inner loop, under a minute: gofmt, go vet, staticcheck, and the
#                unit tests with -short (no multi-process jobs)
#   make test    vet, the no-cgo build, unit tests with -race, cluster and fault tests,
#                then test-poison and fuzz
#   make fuzz    the fuzz targets of what strangers reach first (the ZMTP frame
#                reader and handshake, the meta decoder), 50,000-200,000 inputs each
#   make test-poison  the cluster tests once more with PS_POISON_LENT=1: lent memory
#                is overwritten with 0xDB bytes when given back (docs/MEMORY.md)
#   make nocgo   build every package but the ZeroMQ transport and psbench with CGO_ENABLED=0,
#                and run the protocol's tests that way (over the in-memory network)
#   make demo    test_kv_app, then logistic regression on heart_scale and Fashion-MNIST (2 servers, 2 workers)
#   make proto   regenerate message/pb/meta.pb.go; make proto-check fails on drift
#   make bench   micro-benchmarks, then psbench jobs writing docs/PERFORMANCE.md
#                (PSLITE_CPP_BUILD=dir adds C++ ps-lite alongside, alternated)
#   make bench-zmq  the psbench jobs with our nodes on libzmq (DMLC_PS_VAN_TYPE=zmq),
#                writing docs/PERFORMANCE-ZMQ.md
#   make netimpair  build/netimpair, the NFQUEUE delay/loss program behind
#                scripts/netns.sh impair (needs cc and libnetfilter-queue-dev; not in all)
GO        ?= go
BUILD     ?= build
PROTOC_GEN_GO_VERSION := v1.36.12
STATICCHECK_VERSION   := v0.8.2
GOBIN     := $(shell $(GO) env GOPATH)/bin

.PHONY: all deps build check test test-packages test-poison fuzz nocgo demo proto proto-check bench bench-zmq vet clean netimpair

all: build

deps:
	@bash scripts/install_deps.sh

build:
	@mkdir -p $(BUILD)
	$(GO) build -o $(BUILD)/ ./tests/... ./bench/... ./examples/... ./cmd/...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GOBIN)/staticcheck ./...

check: vet
	$(GO) test -short -count=1 $$($(GO) list ./... | grep -v /tests)

# make test starts the tests package (tests/) first, with -race: it takes
# longest, and mostly waits for faults' timeouts and slow links. Everything
# else runs beside it, one after the other, keeping the CPU busy: vet and
# staticcheck, nocgo, the other packages with -race, test-poison and fuzz.
# -parallel 6: the rows of tests/ that mostly wait (t.Parallel) run beside
# each other once its sequential tests are done; no other package has
# parallel tests. -timeout 40m is for a hang, which every test bounds anyway
# (docs/TESTING.md gives the times).
test: build
	@$(GO) test -race -count=1 -timeout 40m -parallel 6 ./tests/ & tests=$$!; \
	$(MAKE) --no-print-directory vet nocgo test-packages test-poison fuzz; rc=$$?; \
	wait $$tests || rc=1; exit $$rc

# The packages but tests/, with -race (make test runs tests/ beside them).
test-packages:
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/tests$$')

# Each target runs from its committed corpus (testdata/fuzz) for a count of
# inputs, about 10 s each on a quiet 2-core machine: a duration (-fuzztime
# 10s) can end in a spurious "context deadline exceeded" when the machine
# is loaded (golang/go#75804, not fixed before go1.27). FUZZTIME, when set,
# replaces the counts (e.g. FUZZTIME=60s).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzFrameReader$$' -fuzztime $(or $(FUZZTIME),200000x) ./van/zmtptransport/
	$(GO) test -run '^$$' -fuzz '^FuzzHandshake$$' -fuzztime $(or $(FUZZTIME),50000x) ./van/zmtptransport/
	$(GO) test -run '^$$' -fuzz '^FuzzKeyCacheReader$$' -fuzztime $(or $(FUZZTIME),100000x) ./van/zmtptransport/
	$(GO) test -run '^$$' -fuzz '^FuzzKeyCodeReader$$' -fuzztime $(or $(FUZZTIME),100000x) ./van/zmtptransport/
	$(GO) test -run '^$$' -fuzz '^FuzzKeyCode$$' -fuzztime $(or $(FUZZTIME),100000x) ./van/zmtptransport/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(or $(FUZZTIME),150000x) ./message/
	$(GO) test -run '^$$' -fuzz '^FuzzBodies$$' -fuzztime $(or $(FUZZTIME),50000x) ./kv/

# The jobs that move values, in process and as real processes, on every
# transport; without -race (make test ran them with it), with poison.
POISON_TESTS := TestProgramsThroughLocalSh|TestKVApp8x8|TestMultiWorkersInOneProcess|TestRepeat|TestLocalIPC|TestZMQPrograms|TestZMTPMixedWithZeroMQ|TestPSFThroughLocalSh|TestKVLens

test-poison:
	PS_POISON_LENT=1 $(GO) test -count=1 -timeout 10m ./kv/ ./psf/
	PS_POISON_LENT=1 $(GO) test -count=1 -timeout 10m -run '$(POISON_TESTS)' ./tests/

# Everything but libzmq's transport builds without cgo, and the pure-Go
# transport and fault network work there (make test runs them in full, with
# -race).
nocgo:
	CGO_ENABLED=0 $(GO) build $$($(GO) list ./... | grep -v -e /van/zmqtransport -e /bench/psbench)
	CGO_ENABLED=0 $(GO) test -short -count=1 ./van/ ./van/control/ ./van/zmtptransport/ ./tests/faults/

demo: build
	scripts/local.sh 2 2 $(BUILD)/test_kv_app
	bash examples/lr/demo.sh
	bash examples/fm/demo.sh

proto:
	@test -x $(GOBIN)/protoc-gen-go || $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	cd message/pb && PATH="$(GOBIN):$$PATH" protoc --go_out=. --go_opt=paths=source_relative meta.proto

proto-check:
	$(GO) test -count=1 -run Drift ./message/pb/

bench: build
	$(GO) test -run XXX -bench . -benchmem ./message/ ./customer/ ./kv/ ./van/ ./psf/
	scripts/bench.sh docs/PERFORMANCE.md

bench-zmq: build
	DMLC_PS_VAN_TYPE=zmq scripts/bench.sh docs/PERFORMANCE-ZMQ.md

netimpair: $(BUILD)/netimpair

$(BUILD)/netimpair: tools/netimpair/netimpair.c
	@mkdir -p $(BUILD)
	$(CC) -O2 -Wall -Wextra -o $@.tmp $< $$(pkg-config --cflags --libs libnetfilter_queue 2>/dev/null || echo -lnetfilter_queue -lnfnetlink)
	@mv -f $@.tmp $@

clean:
	rm -rf $(BUILD)
