"""The measuring harness the project runs on itself, apart from the CLI users install: the drivers
of `make drills`, `make scale`, `make scale-datapath`, `make test-time` and `make ttft-split`
(each `python harness/<driver>.py`), their judgement kept pure so that unit tests can fail
(drill_judgement, scale_judgement with pod_timeline and growth, capacity, latency), and what they
run beside the system under test (streamload, procstat). It imports mooncake_pd and the tests'
support package; nothing in mooncake_pd imports it, and the mooncake-pd wheel does not hold it."""
