# Braid — build, run, test and benchmark.
GO        ?= go
DATA_DIR  ?= $(CURDIR)/data
PKGS      := ./...

.PHONY: all build run test lint bench fmt clean crash-test many-topics-spec cluster cluster-spec replication-spec proto secure-example cli-docs chromium test-ui chaos

all: build

VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo devel)

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/braid ./cmd/braid

## proto: regenerate the protobuf code of the messages between nodes (cluster/clusterpb) from proto/;
## installs protoc (apt-get) and protoc-gen-go (go install) when they are missing
PROTOC_GEN_GO := $(shell $(GO) env GOPATH)/bin/protoc-gen-go
proto:
	@command -v protoc >/dev/null || (apt-get update && apt-get install -y protobuf-compiler)
	@test -x $(PROTOC_GEN_GO) || $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	PATH="$$PATH:$(dir $(PROTOC_GEN_GO))" protoc --proto_path=proto --go_out=. --go_opt=module=github.com/braidmq/braid proto/braid/cluster/v1/*.proto

## run: start the server on the embedded default (embedded NATS, data directory under the repo)
run:
	$(GO) run ./cmd/braid serve --data-dir $(DATA_DIR)

## cli-docs: write docs/cli.md's CLI reference from the commands' own help (make test checks it)
cli-docs:
	BRAID_UPDATE_DOCS=1 $(GO) test -count=1 -run TestCLIReference ./cmd/braid/

## secure-example: Braid with TLS, an operator and two tenant accounts (examples/secure; docs/security.md)
secure-example: build
	$(GO) run ./examples/secure/setup
	./bin/braid serve --config examples/secure/braid.conf

## cluster: three nodes on 127.0.0.1 in the foreground (NATS clients on 4222-4224, routes on 6222-6224,
## /metrics on 9470-9472), data under $(DATA_DIR)/n1..n3; Ctrl-C stops all three
cluster: build
	@for i in 1 2 3; do \
	  ./bin/braid serve --node-id n$$i --data-dir $(DATA_DIR)/n$$i \
	    --nats-listen 127.0.0.1:$$((4221 + i)) --cluster-listen 127.0.0.1:$$((6221 + i)) \
	    --routes nats://127.0.0.1:6222,nats://127.0.0.1:6223,nats://127.0.0.1:6224 \
	    --metrics-listen 127.0.0.1:$$((9469 + i)) & \
	done; wait

## cluster-spec: the cluster specs (three real `braid serve` processes; `make test` runs them too)
cluster-spec:
	$(GO) test -count=1 -v -timeout 30m ./clustertest/

## replication-spec: the kill-and-wipe spec at full size (20 kills of a random node of three, its data directory deleted each time)
replication-spec:
	BRAID_REPLICATION_ROUNDS=20 $(GO) test -count=1 -v -timeout 60m ./clustertest/ -ginkgo.focus "repeated loss"

## chaos: the fault suite in full (every fault, BRAID_CHAOS_ROUNDS runs each, 5 by default), then its table
chaos:
	BRAID_CHAOS_ROUNDS=$${BRAID_CHAOS_ROUNDS:-5} BRAID_CHAOS_TABLE=$(CURDIR)/chaos-table.md $(GO) test -count=1 -v -timeout 90m ./clustertest/ -ginkgo.focus "Faults" ; status=$$?; cat $(CURDIR)/chaos-table.md 2>/dev/null; exit $$status

## test: lint, then every test and spec with the race detector
test: lint chromium
	$(GO) test -race -count=1 -timeout 14m $$($(GO) list $(PKGS) | grep -v /clustertest)
	@# The cluster specs run three nodes whose leases and metadata leader
	@# elections are timing-bound: alone, not beside the other packages.
	$(GO) test -race -count=1 -timeout 14m ./clustertest/

## chromium: install Debian's chromium for the web page's browser test (ui/), when missing
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	  (echo "make: cannot install chromium (apt-get install chromium as root): the ui/ browser test needs it" && exit 1)

## test-ui: the web page in a real headless chromium (make test runs it too)
test-ui: chromium
	$(GO) test -count=1 -v ./ui/

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
	$(GO) run ./benchmarks/cluster -messages 20000 -rounds 2
	$(GO) run ./benchmarks/storage -messages 50000 -rounds 3 -steady 30s -replay 100000
	$(GO) run ./benchmarks/compaction -messages 100000 -keys 10000 -rounds 9
	$(GO) run ./benchmarks/migrate -sizes 64,256
	$(GO) run ./benchmarks/secure -messages 200000 -rounds 5
	$(GO) run ./benchmarks/raftcost -groups 1000,10000 -ticks 50
	$(GO) run ./benchmarks/replication -rounds 3 -idle-groups 10000
	$(GO) run ./benchmarks/cluster -replication -messages 20000 -rounds 3

fmt:
	gofmt -w $$(find . -name '*.go' -not -name '*.pb.go')

clean:
	rm -rf bin data
