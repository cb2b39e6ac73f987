package raftgate

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// Client talks to a gate over its HTTP API.
//
// Retries: a request that provably never reached a node (connection
// refused, DNS failure) and any request a node answered with NOT_LEADER or
// GATE_UNAVAILABLE is retried, on the next endpoint, with backoff, for up
// to RetryFor. A node that answers GATE_HALTED (it left its cluster, see
// HaltError) is skipped at once, without backoff, and not asked again by
// that request; when every endpoint answered so, the request fails with
// GATE_HALTED. Reads are also retried after a broken connection. A write
// whose connection broke after it was sent, or that the gate reports as
// INDETERMINATE (leadership lost mid-commit), is NOT retried: the client
// returns an error with code INDETERMINATE (errors.Is(err,
// ErrIndeterminate)). Retrying such a write is safe: publish and rollback
// with the same (alias, expected generation, root) return the original
// result, createRun with the same parameters returns the same run,
// reassign with the same expected epoch returns the run it made, and
// attest, checkpoint, cancel and fence commands are idempotent (a fence
// advance retried after another client moved the fence past its value
// answers FENCE_REGRESSION, applied before or not).
type Client struct {
	// Endpoints are base URLs of gate nodes, tried in turn.
	Endpoints []string
	HTTP      *http.Client
	// RetryFor bounds the total time spent retrying; zero means 15 s,
	// negative one attempt per endpoint and no waiting. Every endpoint is
	// tried at least once, however long the attempts took.
	RetryFor time.Duration
	// Token, if set, is sent as "Authorization: Bearer TOKEN" with every
	// request (see Config.Token). Sent in clear text (http://) to an
	// address that is not loopback, it is logged as a warning once per
	// gate URL.
	Token string
	// AttemptTimeout bounds how long one attempt at one endpoint waits
	// for the answer (beyond the wait a long-poll asks for), then for
	// each next part of its body: a large answer that keeps arriving is
	// not cut. Zero means DefaultAttemptTimeout, negative no bound. A member that accepts connections but never answers (a
	// frozen process, a paused VM, a black-holed network path) otherwise
	// held a request for good, while the other members had elected a
	// leader: a read that times out goes to the next endpoint, a write
	// whose request was sent is INDETERMINATE (retrying it is safe).
	AttemptTimeout time.Duration
	// Logger receives the client's warnings (a token sent in clear
	// text); nil means slog.Default().
	Logger *slog.Logger
	next   atomic.Uint32
	// err refuses every request: an endpoint NewClient could not use.
	err error
	// cleartextWarned holds the gate URLs warnCleartext warned about.
	cleartextWarned sync.Map
	// memberTraffic marks a member's client of another member (a join,
	// a join probe), which does not warn of a token sent in clear text:
	// its node warned once at start (see Node.Start).
	memberTraffic bool
}

// mistypedScheme matches a gate URL whose scheme lost a colon or a slash.
var mistypedScheme = regexp.MustCompile(`^(?i)(https?)(:/?|/+)(?:[^/]|$)`)

// DefaultAttemptTimeout is AttemptTimeout's default: twice a node's
// default apply timeout, so a write the leader is still committing is
// not cut short.
const DefaultAttemptTimeout = 20 * time.Second

// NewClient returns a client for a comma-separated list of gate URLs or
// host:port addresses.
func NewClient(urls string) *Client {
	c := &Client{HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}}
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSuffix(strings.TrimSpace(u), "/")
		if u == "" {
			continue
		}
		if m := mistypedScheme.FindStringSubmatch(u); m != nil {
			// "http//host" or "http:/host" would become the host "http"
			// and fail with a DNS error, after RetryFor.
			c.err = errcode.New(errcode.Usage, "gate URL %q: did you mean %s://%s?", truncate(u), strings.ToLower(m[1]), truncate(u[len(m[1])+len(m[2]):]))
		}
		if !strings.Contains(u, "://") {
			u = "http://" + u
		}
		if pu, err := url.Parse(u); c.err == nil && (err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "") {
			// Retrying would only repeat the refusal for RetryFor.
			c.err = errcode.New(errcode.Usage, "gate URL %q: want http://host:port or https://host:port", truncate(u))
		}
		c.Endpoints = append(c.Endpoints, u)
	}
	return c
}

// UseTLS verifies the gate's HTTPS certificates with cfg (RootCAs: the
// gate's CA) instead of the system's roots.
func (c *Client) UseTLS(cfg *tls.Config) {
	c.HTTP.Transport.(*http.Transport).TLSClientConfig = cfg
}

// UseCAFile verifies the gate's HTTPS certificates against the CA
// certificates in a PEM file (see LoadCAs); an empty path keeps the
// system's roots. A file LoadCAs refuses makes every request fail with
// its error.
func (c *Client) UseCAFile(path string) {
	if path == "" {
		return
	}
	pool, err := LoadCAs(path)
	if err != nil {
		if c.err == nil {
			c.err = err
		}
		return
	}
	c.UseTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
}

// noGateHint says what to do when nothing listens at a gate URL. A
// member asking another (a join, a join probe, the leader asking for a
// version) gets none: its URL is a member's, not one a user gave with
// --gate, and founding a gate with --bootstrap is no cure for a member
// that is down.
func (c *Client) noGateHint(last error) string {
	if c.memberTraffic || !errors.Is(last, syscall.ECONNREFUSED) {
		return ""
	}
	return " (nothing listens there: start a gate with `shardproof gate serve --data DIR --bootstrap`, or name a running one with --gate or $SHARDPROOF_GATE)"
}

// UseTokenFile sets Token from a token file (see LoadToken); an empty
// path leaves it unset. A file LoadToken refuses makes every request
// fail with its error.
func (c *Client) UseTokenFile(path string) {
	if path == "" {
		return
	}
	tok, err := LoadToken(path)
	if err != nil {
		if c.err == nil {
			c.err = err
		}
		return
	}
	c.Token = string(tok)
}

// Close releases idle connections.
func (c *Client) Close() { c.HTTP.CloseIdleConnections() }

// do sends one request, retrying as described on Client, and decodes a
// successful answer (or the state-changing result of a rejection) into out.
func (c *Client) do(ctx context.Context, method, path string, in any, out any) error {
	return c.doPoll(ctx, method, path, in, out, 0)
}

// doPoll is do for a request the server may hold for up to poll (a
// long-poll): each attempt's bound is AttemptTimeout plus poll.
func (c *Client) doPoll(ctx context.Context, method, path string, in any, out any, poll time.Duration) error {
	if c.err != nil {
		return c.err
	}
	if len(c.Endpoints) == 0 {
		return errcode.New(errcode.Usage, "no gate URL given")
	}
	var body []byte
	if in != nil {
		var err error
		if cmd, ok := in.(Command); ok {
			body, err = EncodeCommand(cmd)
		} else {
			body, err = json.Marshal(in)
		}
		if err != nil {
			return errcode.Wrap(errcode.Internal, err, "encode request")
		}
	}
	retryFor := c.RetryFor
	if retryFor == 0 {
		retryFor = 15 * time.Second
	}
	deadline := time.Now().Add(retryFor)
	backoff := 20 * time.Millisecond
	start := int(c.next.Load())
	var last error
	// halted holds the endpoints that answered GATE_HALTED: a member
	// that left its cluster until it is upgraded and restarted, which
	// this request skips from then on.
	halted := map[int]bool{}
	for attempt := 0; ; attempt++ {
		i := (start + attempt) % len(c.Endpoints)
		if halted[i] {
			continue
		}
		retry, err := c.once(ctx, method, c.Endpoints[i]+path, body, out, poll)
		if !retry {
			c.next.Store(uint32(i))
			return err
		}
		last = err
		if ctx.Err() != nil {
			return errcode.Wrap(errcode.Canceled, ctx.Err(), "gate request %s %s (last: %v)", method, path, last)
		}
		if errcode.Of(err) == errcode.GateHalted {
			halted[i] = true
			if len(halted) == len(c.Endpoints) {
				// No member given serves; retrying would not change
				// that until one is upgraded.
				return err
			}
			// The next member at once: no backoff for an answer
			// that says nothing of the cluster.
			if retryFor >= 0 || attempt+1 < len(c.Endpoints) {
				continue
			}
		}
		if retryFor < 0 {
			if attempt+1 >= len(c.Endpoints) {
				return errcode.Wrap(errcode.GateUnavailable, last, "no gate answered %s %s (no retries)%s", method, path, c.noGateHint(last))
			}
			continue
		}
		// An attempt may take longer than retryFor (one that timed out):
		// every endpoint gets its chance before giving up.
		if time.Now().After(deadline) && attempt+1 >= len(c.Endpoints) {
			return errcode.Wrap(errcode.GateUnavailable, last, "no gate answered %s %s within %s%s", method, path, retryFor, c.noGateHint(last))
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// once sends one request and says whether a failure may be retried.
func (c *Client) once(ctx context.Context, method, u string, body []byte, out any, poll time.Duration) (retry bool, err error) {
	// The bound is on silence, not on the transfer: waiting for the
	// answer (plus a long-poll's wait), then for each next part of its
	// body. A large answer that keeps arriving (the whole state of a big
	// gate, read by `gate backup`) is not cut short.
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	limit := c.AttemptTimeout
	if limit == 0 {
		limit = DefaultAttemptTimeout
	}
	var timer *time.Timer
	if limit > 0 {
		timer = time.AfterFunc(limit+poll, func() { cancel(errAttemptTimeout) })
		defer timer.Stop()
	}
	// timedOut: this attempt's bound ended, not the caller's context.
	timedOut := func() bool { return context.Cause(actx) == errAttemptTimeout && ctx.Err() == nil }
	var wrote atomic.Bool
	tctx := httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		// Before the request, and so the token, is written.
		GotConn:      func(ci httptrace.GotConnInfo) { c.warnCleartext(u, ci.Conn) },
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	})
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(tctx, method, u, rd)
	if err != nil {
		return false, errcode.Wrap(errcode.Usage, err, "gate URL %s", u)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		if timedOut() {
			if method == http.MethodPost && wrote.Load() {
				return false, errcode.Wrap(errcode.Indeterminate, err, "%s %s: no answer within the attempt timeout after the command was sent; retrying it is safe", method, u)
			}
			return true, errcode.Wrap(errcode.GateUnavailable, err, "%s %s: no answer within the attempt timeout", method, u)
		}
		if ctx.Err() != nil && method == http.MethodPost && wrote.Load() {
			return false, errcode.Wrap(errcode.Indeterminate, err, "%s %s canceled after it was sent", method, u)
		}
		if method == http.MethodPost && wrote.Load() {
			return false, errcode.Wrap(errcode.Indeterminate, err, "%s %s: connection lost after the command was sent; retrying it is safe", method, u)
		}
		var cv *tls.CertificateVerificationError
		if errors.As(err, &cv) {
			// Retrying would only repeat it for RetryFor.
			return false, errcode.Wrap(errcode.Usage, err, "%s %s: the gate's certificate does not verify (give its CA with --gate-ca or $SHARDPROOF_GATE_CA, and a URL whose host the certificate names)", method, u)
		}
		return true, errcode.Wrap(errcode.GateUnavailable, err, "%s %s", method, u)
	}
	defer resp.Body.Close()
	var rbody io.Reader = resp.Body
	if timer != nil {
		timer.Reset(limit)
		rbody = &progressReader{r: resp.Body, timer: timer, limit: limit}
	}
	b, err := io.ReadAll(io.LimitReader(rbody, maxResponseSize))
	if err != nil {
		if timedOut() {
			err = fmt.Errorf("no part of the answer within the attempt timeout: %w", err)
		}
		if method == http.MethodPost {
			return false, errcode.Wrap(errcode.Indeterminate, err, "%s %s: answer lost; retrying it is safe", method, u)
		}
		return true, errcode.Wrap(errcode.GateUnavailable, err, "%s %s", method, u)
	}
	if resp.StatusCode == http.StatusOK {
		if out == nil {
			return false, nil
		}
		if method == http.MethodPost { // every POST answers a CommandResponse
			var cr CommandResponse
			if err := json.Unmarshal(b, &cr); err != nil {
				return false, notAGate(u, err)
			}
			b = cr.Result
		}
		if err := json.Unmarshal(b, out); err != nil {
			return false, notAGate(u, err)
		}
		if hr, ok := out.(headerReader); ok {
			hr.readHeader(resp.Header)
		}
		return false, nil
	}
	var eb ErrorBody
	if err := json.Unmarshal(b, &eb); err != nil || !errcode.Known(eb.Error.Code) {
		if resp.StatusCode == http.StatusBadRequest && bytes.Contains(b, []byte("Client sent an HTTP request to an HTTPS server")) {
			// Go's TLS server answers a plain request so: the gate
			// serves HTTPS (gate serve --tls-cert).
			return false, errcode.Wrap(errcode.Usage, errNotAPI, "%s %s: this gate serves HTTPS: give its URL as https://%s (with --gate-ca CA, or $SHARDPROOF_GATE_CA, when its CA is not in the system's roots)", method, u, req.URL.Host)
		}
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests {
			// Not a gate's answer, and not a transient one: a URL that
			// is no gate API path (a name like ".." that the path
			// cleaning removes), or a server that is no gate.
			return false, errcode.Wrap(errcode.Usage, errNotAPI, "%s %s: HTTP %d", method, u, resp.StatusCode)
		}
		return true, errcode.New(errcode.GateUnavailable, "%s %s: HTTP %d", method, u, resp.StatusCode)
	}
	if out != nil && len(eb.Result) > 0 {
		json.Unmarshal(eb.Result, out)
	}
	msg := strings.TrimPrefix(eb.Error.Message, string(eb.Error.Code)+": ")
	rerr := &errcode.Error{Code: eb.Error.Code, Msg: msg}
	switch eb.Error.Code {
	case errcode.NotLeader, errcode.GateUnavailable, errcode.GateHalted:
		return true, rerr
	}
	return false, rerr
}

// warnCleartext logs a warning, once per gate URL, when the client sends
// its token over conn in clear text to a host that is not loopback: a
// plain http:// URL, an address other hosts reach. Whoever sees the
// traffic can then read the token and use the gate with it. It is a
// warning, not a refusal: a gate on a network its operators trust may
// run without TLS, as it did before.
func (c *Client) warnCleartext(u string, conn net.Conn) {
	if c.Token == "" || c.memberTraffic {
		return
	}
	pu, err := url.Parse(u)
	if err != nil || pu.Scheme != "http" {
		return
	}
	if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
		return
	}
	origin := pu.Scheme + "://" + pu.Host
	if _, warned := c.cleartextWarned.LoadOrStore(origin, true); warned {
		return
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Warn("the gate token is sent in clear text to "+origin+": plain http to a host that is not loopback, so whoever sees the traffic can read the token and use the gate; serve the gate with TLS (gate serve --tls-cert, --tls-key, --tls-ca) and give an https:// URL",
		"url", origin, "addr", conn.RemoteAddr().String())
}

// errAttemptTimeout is the cause of an attempt cut at Client.AttemptTimeout.
var errAttemptTimeout = errors.New("attempt timeout")

// progressReader re-arms an attempt's timer whenever bytes arrive.
type progressReader struct {
	r     io.Reader
	timer *time.Timer
	limit time.Duration
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.timer.Reset(p.limit)
	}
	return n, err
}

// Apply sends a command and decodes its result into out (may be nil).
func (c *Client) Apply(ctx context.Context, cmd Command, out any) error {
	return c.do(ctx, http.MethodPost, "/v1/commands", cmd, out)
}

// Register records a release or a new report of it. Its signatures are
// sent only to a gate that asks for them (see applyEvidence).
func (c *Client) Register(ctx context.Context, cmd *Register) (*RecheckResult, error) {
	var r RecheckResult
	if len(cmd.Signatures) == 0 {
		return &r, c.Apply(ctx, cmd, &r)
	}
	bare := *cmd
	bare.Signatures = nil
	return &r, c.applyEvidence(ctx, cmd, &bare, &r)
}

// Recheck records a fence recheck of a release. Its signatures are sent
// only to a gate that asks for them (see applyEvidence).
func (c *Client) Recheck(ctx context.Context, cmd *RecheckCmd) (*RecheckResult, error) {
	var r RecheckResult
	if len(cmd.Signatures) == 0 {
		return &r, c.Apply(ctx, cmd, &r)
	}
	bare := *cmd
	bare.Signatures = nil
	return &r, c.applyEvidence(ctx, cmd, &bare, &r)
}

// applyEvidence sends signed, a register or recheck that carries
// verifier signatures, with them only to a gate that asks for them, and
// bare (the same command without them) to any other: a member on a
// build older than the field refuses a command that carries it
// (BAD_DOCUMENT), and one without verifier keys has no use for them. A
// member asks when its status lists verifier keys (Status.VerifierKeys);
// one that does not, but answers the bare command EVIDENCE_UNSIGNED (it,
// or the leader it forwarded to, requires them: members given different
// key files, or keys given since its status was read), changed nothing
// and is sent signed once more.
func (c *Client) applyEvidence(ctx context.Context, signed, bare Command, out any) error {
	st, err := c.Status(ctx)
	if err != nil {
		return fmt.Errorf("ask the gate whether it requires verifier signatures: %w", err)
	}
	if len(st.VerifierKeys) > 0 {
		return c.Apply(ctx, signed, out)
	}
	err = c.Apply(ctx, bare, out)
	if errcode.Of(err) == errcode.EvidenceUnsigned {
		return c.Apply(ctx, signed, out)
	}
	return err
}

// Publish moves alias from expected to expected+1 pointing at root.
// retain sets the rollback window of a new alias (0 = default).
func (c *Client) Publish(ctx context.Context, alias string, root manifest.Digest, expected uint64, retain int) (*PublishResult, error) {
	var r PublishResult
	return &r, c.Apply(ctx, &Publish{Alias: alias, Root: root, ExpectedGeneration: expected, Retain: retain}, &r)
}

// Rollback moves alias to a new generation pointing at a retained root.
func (c *Client) Rollback(ctx context.Context, alias string, root manifest.Digest, expected uint64) (*PublishResult, error) {
	var r PublishResult
	return &r, c.Apply(ctx, &Rollback{Alias: alias, Root: root, ExpectedGeneration: expected}, &r)
}

// AdvanceFence raises a fence, naming no log: the gate then has no log
// prefix digest for it, and no client can check a log against it.
func (c *Client) AdvanceFence(ctx context.Context, kind string, value uint64) (*FenceResult, error) {
	return c.AdvanceFenceLog(ctx, kind, value, manifest.Digest{})
}

// AdvanceFenceLog raises a fence to value, recording log, the prefix
// digest at value of the log it is advanced with (see AdvanceFence.Log).
// At the fence's current value, it records log when the fence has none
// and is FENCE_LOG_MISMATCH when the fence has another.
func (c *Client) AdvanceFenceLog(ctx context.Context, kind string, value uint64, log manifest.Digest) (*FenceResult, error) {
	var r FenceResult
	return &r, c.Apply(ctx, &AdvanceFence{Kind: kind, Value: value, Log: log}, &r)
}

// CreateRun creates (or, with the same parameters, finds) a run.
func (c *Client) CreateRun(ctx context.Context, cmd *CreateRun) (*RunSummary, error) {
	var r RunSummary
	return &r, c.Apply(ctx, cmd, &r)
}

// Attest sends one rank's attestation.
func (c *Client) Attest(ctx context.Context, run string, rank int, root manifest.Digest, shards []manifest.Digest) (*RunSummary, error) {
	var r RunSummary
	return &r, c.Apply(ctx, &Attest{Run: run, Rank: rank, Root: root, Shards: shards}, &r)
}

// AttestEpoch is Attest bound to the assignment epoch the worker verified
// against: after a reassignment it fails with STALE_EPOCH and changes
// nothing, so the worker can verify its new assignment and attest again.
func (c *Client) AttestEpoch(ctx context.Context, run string, rank int, epoch uint64, root manifest.Digest, shards []manifest.Digest) (*RunSummary, error) {
	var r RunSummary
	return &r, c.Apply(ctx, &Attest{Run: run, Rank: rank, Root: root, Shards: shards, Epoch: &epoch}, &r)
}

// Reassign changes a run's assignment.
func (c *Client) Reassign(ctx context.Context, cmd *Reassign) (*RunSummary, error) {
	var r RunSummary
	return &r, c.Apply(ctx, cmd, &r)
}

// AdmitCheckpoint admits a checkpoint.
func (c *Client) AdmitCheckpoint(ctx context.Context, run string, step int64, root manifest.Digest) (*RunSummary, error) {
	var r RunSummary
	return &r, c.Apply(ctx, &AdmitCheckpoint{Run: run, Step: step, Root: root}, &r)
}

// CancelRun cancels a run.
func (c *Client) CancelRun(ctx context.Context, run, reason string) (*RunSummary, error) {
	var r RunSummary
	return &r, c.Apply(ctx, &CancelRun{Run: run, Reason: reason}, &r)
}

// Prune drops runs that ended more than olderThan ago, the closed
// permits nothing names any more and the shard lists of unreachable
// releases (see Prune).
func (c *Client) Prune(ctx context.Context, olderThan time.Duration) (*PruneResult, error) {
	var r PruneResult
	return &r, c.Apply(ctx, &Prune{OlderThanMs: olderThan.Milliseconds()}, &r)
}

// State reads the whole state (linearizable).
func (c *Client) State(ctx context.Context) (*State, error) {
	s := NewState()
	return s, c.do(ctx, http.MethodGet, "/v1/state", nil, s)
}

// StateBytes returns the whole state as the leader encodes it
// (linearizable): a gate backup, which Config.Restore founds a cluster on.
func (c *Client) StateBytes(ctx context.Context) ([]byte, error) {
	b, _, _, err := c.StateBackup(ctx)
	return b, err
}

// StateBackup is StateBytes with the log index of the last command the
// state reflects, read on the leader under the same lock as the state: a
// member's `gate status --digest` at that index shows the sha256 of these
// bytes. indexKnown is false when the gate did not say (a build before
// the index was sent).
func (c *Client) StateBackup(ctx context.Context) (b []byte, index uint64, indexKnown bool, err error) {
	var a stateAnswer
	if err := c.do(ctx, http.MethodGet, "/v1/state", nil, &a); err != nil {
		return nil, 0, false, err
	}
	return a.raw, a.index, a.indexKnown, nil
}

// headerReader is an answer that also takes the response's headers.
type headerReader interface{ readHeader(http.Header) }

// stateAnswer is the answer to GET /v1/state: its bytes as sent, and
// the index in its header.
type stateAnswer struct {
	raw        json.RawMessage
	index      uint64
	indexKnown bool
}

func (a *stateAnswer) UnmarshalJSON(b []byte) error { return a.raw.UnmarshalJSON(b) }

func (a *stateAnswer) readHeader(h http.Header) {
	a.index, a.indexKnown = 0, false
	if v := h.Get(stateIndexHeader); v != "" {
		i, err := strconv.ParseUint(v, 10, 64)
		a.index, a.indexKnown = i, err == nil
	}
}

// Alias reads one alias (linearizable).
func (c *Client) Alias(ctx context.Context, name string) (*Alias, error) {
	var a Alias
	if !addressable(name) {
		return nil, errcode.New(errcode.Usage, "alias name %q cannot be addressed", name)
	}
	return &a, c.do(ctx, http.MethodGet, "/v1/aliases/"+url.PathEscape(name), nil, &a)
}

// Release reads one release (linearizable).
func (c *Client) Release(ctx context.Context, root manifest.Digest) (*Release, error) {
	var r Release
	return &r, c.do(ctx, http.MethodGet, "/v1/releases/"+root.String(), nil, &r)
}

// errNotAPI is a 4xx answer that is not the gate's own: a path it does
// not serve, or a server that is no gate.
var errNotAPI = errors.New("not an answer of the gate's API")

// Fences reads the current fences (linearizable): what a verification
// must reach to be publishable. Status has them too, but as one node's
// own view, which may lag behind the leader's. A gate from before
// /v1/fences answers from its whole state (as linearizable).
func (c *Client) Fences(ctx context.Context) (*Fences, error) {
	var f Fences
	err := c.do(ctx, http.MethodGet, "/v1/fences", nil, &f)
	if errors.Is(err, errNotAPI) {
		s, err := c.State(ctx)
		if err != nil {
			return nil, err
		}
		return &s.Fences, nil
	}
	return &f, err
}

// Permits reads every permit (linearizable).
func (c *Client) Permits(ctx context.Context) ([]*Permit, error) {
	var p []*Permit
	if err := c.do(ctx, http.MethodGet, "/v1/permits", nil, &p); err != nil {
		return nil, err
	}
	// A gate never lists a null permit; an answer that does (not from a
	// gate, or from a broken one) is refused rather than handed on to
	// callers that read every entry.
	for i, e := range p {
		if e == nil {
			return nil, errcode.New(errcode.BadDocument, "gate answer for permits: entry %d is null", i)
		}
	}
	return p, nil
}

// Permit reads one permit (linearizable). Against a gate too old to serve
// one permit it reads them all and picks it.
func (c *Client) Permit(ctx context.Context, id string) (*Permit, error) {
	if !addressable(id) {
		return nil, errcode.New(errcode.Usage, "permit ID %q cannot be addressed", id)
	}
	var p Permit
	err := c.do(ctx, http.MethodGet, "/v1/permits/"+url.PathEscape(id), nil, &p)
	if !errors.Is(err, errNotAPI) {
		return &p, err
	}
	ps, err := c.Permits(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		if p.ID == id {
			return p, nil
		}
	}
	return nil, errcode.New(errcode.UnknownPermit, "no permit %s", id)
}

// Run reads one run with its tables (linearizable).
func (c *Client) Run(ctx context.Context, id string) (*Run, error) {
	var r Run
	if !addressable(id) {
		return nil, errcode.New(errcode.Usage, "run name %q cannot be addressed", id)
	}
	if err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, &r); err != nil {
		return nil, err
	}
	// Workers index both lists by rank: an answer whose lists do not
	// match its world size (not from a gate, or from a broken one) is
	// refused here rather than trusted.
	if r.WorldSize < 0 || len(r.Assignment) != r.WorldSize || len(r.Attestations) != r.WorldSize {
		return nil, errcode.New(errcode.BadDocument, "gate answer for run %s: world size %d with %d assignments and %d attestations", truncate(id), r.WorldSize, len(r.Assignment), len(r.Attestations))
	}
	return &r, nil
}

// notAGate is the error for a 200 answer that does not decode: whatever
// answered at u is not a gate (a wrong --gate), not a gate's failure.
func notAGate(u string, err error) error {
	return errcode.Wrap(errcode.Usage, err, "%s answered 200 with something that is not a gate's answer: is it the gate's HTTP address?", u)
}

// RemoveMember asks the leader to remove member id from the Raft
// configuration (see POST /v1/remove).
func (c *Client) RemoveMember(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/v1/remove", &Remove{ID: id}, nil)
}

// Status reads the first reachable node's own view.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var s Status
	return &s, c.do(ctx, http.MethodGet, "/v1/status", nil, &s)
}

// StatusDigest is Status with the node's state digest and the log index
// it reflects (Status.StateIndex, Status.StateDigest).
func (c *Client) StatusDigest(ctx context.Context) (*Status, error) {
	var s Status
	return &s, c.do(ctx, http.MethodGet, "/v1/status?digest=1", nil, &s)
}

// WaitRun waits until the run's barrier opens (nil error), the run fails
// (its failure code: BARRIER_TIMEOUT, ROOT_MISMATCH, …, or RUN_FAILED when
// cancelled) or ctx ends: BARRIER_CLOSED with the last answer if a gate
// answered, GATE_UNAVAILABLE if none did before ctx's deadline (CANCELED
// if ctx was cancelled first).
func (c *Client) WaitRun(ctx context.Context, id string) (*RunSummary, error) {
	if !addressable(id) {
		return nil, errcode.New(errcode.Usage, "run name %q cannot be addressed", id)
	}
	var last *RunSummary
	for {
		poll := 30 * time.Second
		if d, ok := ctx.Deadline(); ok {
			// Leave the server time to answer before ctx ends.
			poll = min(poll, time.Until(d)-250*time.Millisecond)
		}
		var s RunSummary
		var err error
		if poll > 0 {
			err = c.doPoll(ctx, http.MethodGet, fmt.Sprintf("/v1/runs/%s/wait?timeout=%d", url.PathEscape(id), poll.Milliseconds()), nil, &s, poll)
		} else {
			err = c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, &s)
		}
		if err != nil {
			if ctx.Err() != nil && errcode.Of(err) == errcode.Canceled {
				if last == nil {
					// Not one answer before the wait ended: that says
					// nothing of the barrier.
					if errors.Is(ctx.Err(), context.DeadlineExceeded) {
						return nil, errcode.Wrap(errcode.GateUnavailable, err, "run %s: no gate answered before the wait ended", id)
					}
					return nil, err
				}
				// The caller's wait ended mid-request: the barrier was
				// still closed at the last answer.
				return last, errcode.New(errcode.BarrierClosed, "run %s: barrier still closed when the wait ended", id)
			}
			return nil, err
		}
		last = &s
		switch {
		case s.Barrier == BarrierOpen:
			return &s, nil
		case s.State == RunFailed:
			code := errcode.Code(s.FailCode)
			if !errcode.Known(code) {
				code = errcode.RunFailed
			}
			return &s, errcode.New(code, "run %s failed: %s", id, s.FailReason)
		case s.State == RunCancelled:
			return &s, CancelledError(id, s.FailReason)
		}
		if poll <= 0 || ctx.Err() != nil {
			return &s, errcode.New(errcode.BarrierClosed, "run %s: %d of %d ranks attested at epoch %d", id, s.Attested, s.WorldSize, s.Epoch)
		}
	}
}

// IsIndeterminate reports whether err means the outcome is unknown.
func IsIndeterminate(err error) bool { return errors.Is(err, ErrIndeterminate) }

// CancelledError is the error of a run that was cancelled (RUN_FAILED),
// with the reason its cancel gave, or "no reason given" as run show says
// for one that gave none (it read "was cancelled: ", the reason missing).
func CancelledError(id, reason string) error {
	if reason == "" {
		reason = "no reason given"
	}
	return errcode.New(errcode.RunFailed, "run %s was cancelled: %s", id, reason)
}
