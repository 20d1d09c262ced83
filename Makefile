# Braid — build, run, test and benchmark.
GO        ?= go
DATA_DIR  ?= $(CURDIR)/data
PKGS      := ./...

.PHONY: all build run test lint bench fmt clean crash-test many-topics-spec

all: build

build:
	$(GO) build -o bin/braid ./cmd/braid

## run: start the server on the embedded default (embedded NATS, data directory under the repo)
run:
	$(GO) run ./cmd/braid serve --data-dir $(DATA_DIR)

## test: lint, then every test and spec with the race detector
test: lint
	$(GO) test -race -count=1 -timeout 14m $(PKGS)

## crash-test: SIGKILL a real `braid serve` 60 times (BRAID_CRASH_KILLS) under a producer and a consumer,
## then check every acknowledged message and consumer ack (`make test` runs the same test with 6 kills)
crash-test:
	BRAID_CRASH_KILLS=$${BRAID_CRASH_KILLS:-60} $(GO) test -race=false -count=1 -v -timeout 60m ./crashtest/

## many-topics-spec: the many-topics spec at full size (20,000 topics; `make test` runs 2,000)
many-topics-spec:
	BRAID_SPEC_TOPICS=$${BRAID_SPEC_TOPICS:-20000} $(GO) test -count=1 -v -timeout 60m ./specs/ -ginkgo.focus 'Many topics'

## lint: gofmt check and go vet
lint:
	@out=$$(find . -name '*.go' -not -path './.git/*' -not -name '*.pb.go' | xargs gofmt -l); \
	if [ -n "$$out" ]; then echo "gofmt needs to run on:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## bench: micro-benchmarks of every package, then the programs under benchmarks/
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2000x ./wal/
	$(GO) run ./benchmarks/walcompare
	$(GO) test -run '^$$' -bench . -benchmem ./routing/ ./topology/ ./scaling/
	$(GO) run ./benchmarks/sidebyside
	$(GO) run ./benchmarks/plain
	$(GO) run ./benchmarks/elastic
	$(GO) run ./benchmarks/consumers
	$(GO) run ./benchmarks/fsync
	$(GO) run ./benchmarks/manytopics -topics 1000 -produce-topics 200 -messages 20000

fmt:
	gofmt -w $$(find . -name '*.go' -not -name '*.pb.go')

clean:
	rm -rf bin data
