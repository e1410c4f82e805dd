module ams-benchmarks/loadgen

go 1.22
