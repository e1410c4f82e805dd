// Command pubsub-scenario drives one publish/streaming-pull round trip through
// Google's official Go client (cloud.google.com/go/pubsub/v2) against any
// Pub/Sub v1 gRPC endpoint: AMS's, or Google's emulator.
//
// Connection (exactly one of):
//
//	PUBSUB_EMULATOR_HOST=host:port  plaintext, no credentials (the client's own emulator mode);
//	                                if AMS_TOKEN is set as well, it is sent as x-goog-api-key
//	                                metadata by an interceptor (plaintext AMS endpoints).
//	AMS_GRPC_ENDPOINT=host:port     TLS, CA bundle from AMS_GRPC_CA_FILE (required), optional
//	                                AMS_GRPC_SERVER_NAME to override the name checked in the
//	                                certificate; AMS_TOKEN sent as x-goog-api-key (option.WithAPIKey);
//	                                with AMS_TOKEN empty, no credentials at all.
//
// PUBSUB_PROJECT names the project (required).
//
// The scenario: create a topic and a subscription, publish -n messages
// (data "msg-<i>", attribute i=<i>), wait for every message id, receive them
// with Subscriber.Receive (StreamingPull), ack each, check them, delete the
// subscription and the topic. One JSON line goes to stdout; the exit code is 1
// when it is not ok. -trace logs each RPC (method, status, outgoing metadata)
// to stderr.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

type result struct {
	Published          int    `json:"published"`
	ReceivedDistinct   int    `json:"received_distinct"`
	Duplicates         int    `json:"duplicates"`
	Mismatched         int    `json:"mismatched"`
	PublishTimeMissing int    `json:"publish_time_missing"`
	StreamsOpened      int64  `json:"streams_opened"`
	Topic              string `json:"topic"`
	Subscription       string `json:"subscription"`
	PublishMs          int64  `json:"publish_ms"`
	ReceiveMs          int64  `json:"receive_ms"`
	OK                 bool   `json:"ok"`
	Error              string `json:"error"`
}

var (
	trace bool
	// streamsOpened counts StreamingPull calls; more than one means the client
	// re-opened the stream (server closed it, or missed a keepalive answer).
	streamsOpened atomic.Int64
)

var started = time.Now()

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pubsub-scenario: +%.3fs "+format+"\n",
		append([]any{time.Since(started).Seconds()}, args...)...)
}

// describeMD renders outgoing metadata for -trace, hiding the token.
func describeMD(ctx context.Context) string {
	md, _ := metadata.FromOutgoingContext(ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := strings.Join(md[k], ",")
		if k == "x-goog-api-key" {
			v = "<redacted>"
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, " ")
}

func traceUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	if trace {
		logf("rpc %s code=%s %s md: %s", method, status.Code(err), time.Since(start).Round(time.Millisecond), describeMD(ctx))
	}
	return err
}

func traceStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err == nil && strings.HasSuffix(method, "/StreamingPull") {
		streamsOpened.Add(1)
	}
	if trace {
		logf("stream open %s code=%s md: %s", method, status.Code(err), describeMD(ctx))
	}
	return s, err
}

// tokenUnary and tokenStream add the token as metadata on plaintext connections,
// where option.WithAPIKey (per-RPC credentials that require transport security) cannot.
func tokenUnary(token string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(metadata.AppendToOutgoingContext(ctx, "x-goog-api-key", token), method, req, reply, cc, opts...)
	}
}

func tokenStream(token string) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(metadata.AppendToOutgoingContext(ctx, "x-goog-api-key", token), desc, cc, method, opts...)
	}
}

func clientOptions() ([]option.ClientOption, string, error) {
	emulator := os.Getenv("PUBSUB_EMULATOR_HOST")
	endpoint := os.Getenv("AMS_GRPC_ENDPOINT")
	token := os.Getenv("AMS_TOKEN")
	opts, where, err := connectOptions(emulator, endpoint, token)
	if err != nil {
		return nil, "", err
	}
	// Chained after any other interceptor, so they see the final outgoing metadata.
	opts = append(opts,
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(traceUnary)),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(traceStream)))
	return opts, where, nil
}

func connectOptions(emulator, endpoint, token string) ([]option.ClientOption, string, error) {
	var opts []option.ClientOption
	switch {
	case emulator != "" && endpoint != "":
		return nil, "", errors.New("set one of PUBSUB_EMULATOR_HOST and AMS_GRPC_ENDPOINT, not both")
	case emulator != "":
		// The client itself dials plaintext without credentials (apiv1/emulator_hook.go).
		if token != "" {
			opts = append(opts,
				option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(tokenUnary(token))),
				option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(tokenStream(token))))
		}
		return opts, "plaintext " + emulator, nil
	case endpoint != "":
		caFile := os.Getenv("AMS_GRPC_CA_FILE")
		if caFile == "" {
			return nil, "", errors.New("AMS_GRPC_ENDPOINT needs AMS_GRPC_CA_FILE")
		}
		creds, err := credentials.NewClientTLSFromFile(caFile, os.Getenv("AMS_GRPC_SERVER_NAME"))
		if err != nil {
			return nil, "", fmt.Errorf("CA file %s: %w", caFile, err)
		}
		// Dial options given by the caller come after the transport's default TLS
		// credentials, so these replace them (google.golang.org/api/transport/grpc).
		opts = append(opts,
			option.WithEndpoint(endpoint),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(creds)),
			option.WithTelemetryDisabled())
		if token != "" {
			// Per-RPC credentials: metadata "x-goog-api-key: <token>", TLS only.
			opts = append(opts, option.WithAPIKey(token))
		} else {
			opts = append(opts, option.WithoutAuthentication())
		}
		return opts, "tls " + endpoint, nil
	default:
		return nil, "", errors.New("set PUBSUB_EMULATOR_HOST or AMS_GRPC_ENDPOINT")
	}
}

func randomSuffix() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func main() {
	n := flag.Int("n", 200, "number of messages to publish")
	timeout := flag.Duration("timeout", 60*time.Second, "how long to receive before giving up")
	topicID := flag.String("topic", "", "topic id (default go-scenario-<random>)")
	subID := flag.String("sub", "", "subscription id (default <topic>-sub)")
	ackDeadline := flag.Int("ack-deadline", 10, "subscription ack deadline, seconds")
	linger := flag.Duration("linger", 0,
		"keep the stream open this long after the last message (exercises the client's 30 s keepalive pings)")
	flag.BoolVar(&trace, "trace", false, "log each RPC with its outgoing metadata to stderr")
	flag.Parse()

	res := run(*n, *timeout, *linger, *topicID, *subID, int32(*ackDeadline))
	line, _ := json.Marshal(res)
	fmt.Println(string(line))
	if !res.OK {
		os.Exit(1)
	}
}

func run(n int, timeout, linger time.Duration, topicID, subID string, ackDeadline int32) (res result) {
	fail := func(format string, args ...any) result {
		res.OK = false
		res.Error = fmt.Sprintf(format, args...)
		return res
	}
	if n < 1 {
		return fail("-n must be at least 1")
	}
	project := os.Getenv("PUBSUB_PROJECT")
	if project == "" {
		return fail("PUBSUB_PROJECT is not set")
	}
	opts, where, err := clientOptions()
	if err != nil {
		return fail("%v", err)
	}
	if topicID == "" {
		topicID = "go-scenario-" + randomSuffix()
	}
	if subID == "" {
		subID = topicID + "-sub"
	}
	topicName := "projects/" + project + "/topics/" + topicID
	subName := "projects/" + project + "/subscriptions/" + subID
	res.Topic, res.Subscription = topicName, subName
	logf("%s, project %s, topic %s, subscription %s, %d messages", where, project, topicID, subID, n)

	ctx := context.Background()
	client, err := pubsub.NewClient(ctx, project, opts...)
	if err != nil {
		return fail("new client: %v", err)
	}
	defer client.Close()

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := client.TopicAdminClient.CreateTopic(cctx, &pubsubpb.Topic{Name: topicName}); err != nil {
		return fail("create topic: %v", err)
	}
	subCreated := false
	// Clean up last; a failed delete fails the run only if nothing failed before.
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		var errs []string
		if subCreated {
			err := client.SubscriptionAdminClient.DeleteSubscription(dctx,
				&pubsubpb.DeleteSubscriptionRequest{Subscription: subName})
			if err != nil {
				errs = append(errs, "delete subscription: "+err.Error())
			}
		}
		if err := client.TopicAdminClient.DeleteTopic(dctx, &pubsubpb.DeleteTopicRequest{Topic: topicName}); err != nil {
			errs = append(errs, "delete topic: "+err.Error())
		}
		if len(errs) > 0 && res.Error == "" {
			res.OK = false
			res.Error = strings.Join(errs, "; ")
		}
	}()
	_, err = client.SubscriptionAdminClient.CreateSubscription(cctx, &pubsubpb.Subscription{
		Name:               subName,
		Topic:              topicName,
		AckDeadlineSeconds: ackDeadline,
	})
	if err != nil {
		return fail("create subscription: %v", err)
	}
	subCreated = true

	// Publish: the client batches (10 ms / 100 messages by default) into Publish RPCs.
	start := time.Now()
	publisher := client.Publisher(topicName)
	results := make([]*pubsub.PublishResult, n)
	for i := 0; i < n; i++ {
		results[i] = publisher.Publish(ctx, &pubsub.Message{
			Data:       []byte("msg-" + strconv.Itoa(i)),
			Attributes: map[string]string{"i": strconv.Itoa(i)},
		})
	}
	ids := make([]string, n)
	idIndex := make(map[string]int, n)
	var pubErrs []string
	for i, r := range results {
		id, err := r.Get(ctx)
		if err != nil {
			pubErrs = append(pubErrs, fmt.Sprintf("message %d: %v", i, err))
			continue
		}
		res.Published++
		ids[i] = id
		if prev, dup := idIndex[id]; dup {
			pubErrs = append(pubErrs, fmt.Sprintf("messages %d and %d got the same id %q", prev, i, id))
		}
		idIndex[id] = i
	}
	publisher.Stop()
	res.PublishMs = time.Since(start).Milliseconds()
	if len(pubErrs) > 0 {
		if len(pubErrs) > 5 {
			pubErrs = append(pubErrs[:5], fmt.Sprintf("and %d more", len(pubErrs)-5))
		}
		return fail("publish: %s", strings.Join(pubErrs, "; "))
	}
	logf("published %d in %d ms", n, res.PublishMs)

	// Receive (StreamingPull) until every message arrived once, or the timeout.
	start = time.Now()
	var mu sync.Mutex
	seen := make(map[string]bool, n)
	var problems []string
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	deadline := time.AfterFunc(timeout, rcancel)
	sub := client.Subscriber(subName)
	recvErr := sub.Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		if seen[m.ID] {
			res.Duplicates++
			return
		}
		seen[m.ID] = true
		res.ReceivedDistinct++
		i, known := idIndex[m.ID]
		want := fmt.Sprintf("msg-%d", i)
		switch {
		case !known:
			res.Mismatched++
			problems = append(problems, fmt.Sprintf("unknown message id %q (data %q)", m.ID, m.Data))
		case string(m.Data) != want:
			res.Mismatched++
			problems = append(problems, fmt.Sprintf("id %s: data %q, want %q", m.ID, m.Data, want))
		case len(m.Attributes) != 1 || m.Attributes["i"] != strconv.Itoa(i):
			res.Mismatched++
			problems = append(problems, fmt.Sprintf("id %s: attributes %v, want map[i:%d]", m.ID, m.Attributes, i))
		}
		if m.PublishTime.Unix() <= 0 {
			res.PublishTimeMissing++
		}
		if res.ReceivedDistinct == n && deadline.Stop() {
			time.AfterFunc(linger, rcancel)
		}
	})
	res.ReceiveMs = time.Since(start).Milliseconds()
	res.StreamsOpened = streamsOpened.Load()
	logf("received %d distinct, %d duplicates in %d ms", res.ReceivedDistinct, res.Duplicates, res.ReceiveMs)

	mu.Lock()
	defer mu.Unlock()
	var errs []string
	if recvErr != nil && !errors.Is(recvErr, context.Canceled) && !errors.Is(recvErr, context.DeadlineExceeded) {
		errs = append(errs, "receive: "+recvErr.Error())
	}
	if res.ReceivedDistinct < n {
		var missing []string
		for i, id := range ids {
			if !seen[id] {
				missing = append(missing, strconv.Itoa(i))
				if len(missing) == 10 {
					missing = append(missing, "...")
					break
				}
			}
		}
		errs = append(errs, fmt.Sprintf("received %d of %d within %s; missing i=%s",
			res.ReceivedDistinct, n, timeout, strings.Join(missing, ",")))
	}
	if len(problems) > 0 {
		if len(problems) > 5 {
			problems = append(problems[:5], fmt.Sprintf("and %d more", len(problems)-5))
		}
		errs = append(errs, strings.Join(problems, "; "))
	}
	if len(errs) > 0 {
		return fail("%s", strings.Join(errs, "; "))
	}
	res.OK = true
	return res
}
