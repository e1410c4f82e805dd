// ams-loadgen: an HTTP(S) load generator for the publish benchmark (benchmarks/publish.py).
//
// Each of -clients connections (keep-alive, one request at a time) POSTs the same body to -url
// for -seconds, and the program prints one JSON object: requests, failures, seconds and the
// request latencies' percentiles. Standard library only; it trusts -ca (or skips verification
// with -insecure, for a loopback server with a throwaway certificate).
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

type result struct {
	Requests  int     `json:"requests"`
	Failures  int     `json:"failures"`
	FirstFail string  `json:"first_failure,omitempty"`
	Seconds   float64 `json:"seconds"`
	P50ms     float64 `json:"p50_ms"`
	P90ms     float64 `json:"p90_ms"`
	P99ms     float64 `json:"p99_ms"`
}

func main() {
	url := flag.String("url", "", "where to POST")
	bodyFile := flag.String("body", "", "file holding the request body")
	key := flag.String("key", "", "x-api-key header")
	clients := flag.Int("clients", 4, "concurrent connections")
	seconds := flag.Float64("seconds", 10, "how long to send")
	warmup := flag.Float64("warmup", 1, "seconds sent first and not counted")
	ca := flag.String("ca", "", "PEM CA bundle to verify the server with")
	insecure := flag.Bool("insecure", false, "do not verify the server's certificate")
	flag.Parse()

	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	tlsConfig := &tls.Config{InsecureSkipVerify: *insecure}
	if *ca != "" {
		pem, err := os.ReadFile(*ca)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tlsConfig.RootCAs = pool
	}
	transport := &http.Transport{
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: *clients,
		MaxConnsPerHost:     *clients,
		DisableCompression:  true,
	}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}

	send := func() (time.Duration, string) {
		req, _ := http.NewRequest("POST", *url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if *key != "" {
			req.Header.Set("x-api-key", *key)
		}
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		elapsed := time.Since(t0)
		if resp.StatusCode != 200 {
			return elapsed, fmt.Sprintf("%d %s", resp.StatusCode, answer)
		}
		return elapsed, ""
	}

	var mu sync.Mutex
	var latencies []time.Duration
	out := result{}
	start := time.Now()
	countFrom := start.Add(time.Duration(*warmup * float64(time.Second)))
	stopAt := countFrom.Add(time.Duration(*seconds * float64(time.Second)))
	var wg sync.WaitGroup
	for i := 0; i < *clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			failures, first := 0, ""
			for {
				began := time.Now()
				if !began.Before(stopAt) {
					break
				}
				elapsed, failure := send()
				if began.Before(countFrom) {
					continue
				}
				if failure != "" {
					failures++
					if first == "" {
						first = failure
					}
					continue
				}
				mine = append(mine, elapsed)
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			out.Failures += failures
			if out.FirstFail == "" {
				out.FirstFail = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	out.Seconds = time.Since(countFrom).Seconds()
	out.Requests = len(latencies)
	sort.Slice(latencies, func(a, b int) bool { return latencies[a] < latencies[b] })
	at := func(q float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		i := int(q * float64(len(latencies)))
		if i >= len(latencies) {
			i = len(latencies) - 1
		}
		return float64(latencies[i].Microseconds()) / 1000
	}
	out.P50ms, out.P90ms, out.P99ms = at(0.5), at(0.9), at(0.99)
	json.NewEncoder(os.Stdout).Encode(out)
}
