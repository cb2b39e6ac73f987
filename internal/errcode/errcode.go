// Package errcode is shardproof's one catalogue of stable error codes.
//
// Every error a user can meet carries exactly one Code from this file. The
// code appears in the CLI's stderr line and exit status, in the gate's HTTP
// API, in verification reports and in logs. Codes are a public contract:
// never rename one; add new codes at the end of their group.
package errcode

import (
	"errors"
	"fmt"
)

// Code is a stable, upper-case error code such as DIGEST_MISMATCH.
type Code string

// Exit statuses of the shardproof CLI. Scripts rely on them.
const (
	ExitOK            = 0 // success; for verify: verdict VERIFIED
	ExitInvalid       = 1 // the input was checked and found wrong (verdict INVALID, bad document)
	ExitUsage         = 2 // bad flags or arguments, credentials refused (UNAUTHENTICATED, STORE_DENIED), a store URL naming no bucket (NO_SUCH_BUCKET), a cache bound below a worker's shards (CACHE_TOO_SMALL)
	ExitError         = 3 // operational error: store or network unreachable, I/O failure
	ExitRejected      = 4 // the gate or store refused a command (conflict, fence, permit, precondition)
	ExitIndeterminate = 5 // the outcome is unknown (leader lost mid-commit): retry is safe
)

// entry describes one code.
type entry struct {
	exit    int
	meaning string
}

// The catalogue. Keep it sorted by group; meanings are one line each.
var catalogue = map[Code]entry{
	// Verification: a shard's bytes or records disagree with the manifest.
	DigestMismatch:      {ExitInvalid, "stored bytes do not hash to the descriptor's digest"},
	SizeMismatch:        {ExitInvalid, "stored object size differs from the descriptor's size"},
	LogicalMismatch:     {ExitInvalid, "decoded record stream does not hash to the descriptor's logicalDigest"},
	CountMismatch:       {ExitInvalid, "record, token or member-set figures differ from the descriptor"},
	FooterCorrupt:       {ExitInvalid, "Parquet footer or column-chunk bounds are invalid"},
	DecodeError:         {ExitInvalid, "Parquet/Arrow decoding of the shard failed"},
	SchemaMismatch:      {ExitInvalid, "shard schema differs from the manifest's recordSchema"},
	VersionMissing:      {ExitInvalid, "the descriptor's objectVersion does not exist in the store"},
	TupleRootMismatch:   {ExitInvalid, "recomputed orderedMemberTupleRoot differs from the manifest"},
	MissingMember:       {ExitInvalid, "a snapshot member is absent from the release"},
	ExtraMember:         {ExitInvalid, "the release holds a member absent from the snapshot"},
	DuplicateMember:     {ExitInvalid, "a member appears more often in the release than in the snapshot"},
	ContentSubstitution: {ExitInvalid, "same sampleId, different content digest"},
	SourceVersionChange: {ExitInvalid, "same sampleId, different sourceVersion"},
	SourceIDChange:      {ExitInvalid, "same sampleId, different sourceId"},
	SplitConflict:       {ExitInvalid, "same sampleId, different split"},
	SchemaMix:           {ExitInvalid, "same sampleId, different record schema"},
	TombstoneHit:        {ExitInvalid, "the release holds a sample deleted by the tombstone log"},
	BenchmarkHit:        {ExitInvalid, "the release holds a benchmark (eval) item"},

	// Documents.
	BadDigest:          {ExitInvalid, "a digest string is not sha256: followed by 64 lowercase hex digits"},
	BadDocument:        {ExitInvalid, "a document is malformed: unknown field, duplicate key, wrong type or schema"},
	BadCount:           {ExitInvalid, "a count is negative or inconsistent"},
	TotalsMismatch:     {ExitInvalid, "totals do not add up over the document's entries"},
	DocumentTooLarge:   {ExitInvalid, "a document exceeds its size cap"},
	BadInput:           {ExitInvalid, "input data lacks required columns or values are out of range"},
	WatermarkUnchecked: {ExitInvalid, "the release claims a tombstoneWatermark or benchmarkFence the fence documents checked do not reach (none given: 0)"},

	// Store.
	PreconditionFailed: {ExitRejected, "conditional create found the key already present"},
	NotFound:           {ExitError, "no such key or version in the store"},
	BadKey:             {ExitUsage, "a key is empty, malformed or would escape the store root"},
	StoreUnavailable:   {ExitError, "the store cannot be opened or reached"},
	VersioningOff:      {ExitError, "the S3 bucket does not have versioning enabled, or it was suspended while the command ran: enable it on the bucket (Status=Enabled)"},
	Nondeterminism:     {ExitInvalid, "a rerun task produced output that differs from the committed output"},
	ShuffleCorrupt:     {ExitError, "a shuffle file or task commit record cannot be decoded or breaks its order"},
	TaskNotReady:       {ExitError, "a task's inputs are not committed yet (run the earlier phase first)"},
	FileLimit:          {ExitError, "a reduce task, or a worker with a bounded cache (one lock per assigned shard), would hold more files open at once than the process may (ulimit -n)"},
	JobInUse:           {ExitError, "another live process runs this verification job or deletes its files (verify --resume, store prune-jobs)"},
	StoreDenied:        {ExitUsage, "the store refused the credentials, signature or region of a request, or its policy denies it, or no credentials were found, or a file store's directory refuses this user (its permissions, an immutable flag) or is on a read-only file system; retrying does not help"},
	NoSuchBucket:       {ExitUsage, "the S3 bucket the store URL names does not exist (or was deleted while the command ran); shardproof never creates one, and retrying does not help"},

	// Gate.
	GenerationConflict: {ExitRejected, "expected generation differs from the alias's current generation"},
	PublishConflict:    {ExitRejected, "a retry at this generation names another root"},
	NotVerified:        {ExitRejected, "the release is not VERIFIED"},
	FenceBehind:        {ExitRejected, "the report's watermarks are below the current fences, or hits are non-zero"},
	FenceRegression:    {ExitRejected, "a fence may only advance"},
	PermitClosed:       {ExitRejected, "the permit was closed by a fence advance"},
	RollbackIneligible: {ExitRejected, "the rollback target is not retained or fails the current fences"},
	RootMismatch:       {ExitRejected, "a worker attested a root other than the run's"},
	ShardNotAssigned:   {ExitRejected, "a worker attested a shard outside its assignment"},
	BarrierTimeout:     {ExitRejected, "the barrier deadline passed before every rank attested"},
	RunFailed:          {ExitRejected, "the run has failed or was cancelled"},
	UnknownAlias:       {ExitRejected, "no such alias"},
	UnknownRelease:     {ExitRejected, "no such release"},
	UnknownRun:         {ExitRejected, "no such run"},
	RunPruned:          {ExitRejected, "the run ended and was pruned; a run ID is never reused"},
	AlreadyExists:      {ExitRejected, "the name is already taken with different parameters"},
	NotLeader:          {ExitError, "this gate node is not the Raft leader"},
	Indeterminate:      {ExitIndeterminate, "the command may or may not have been applied; retrying is safe"},
	GateUnavailable:    {ExitError, "the gate cannot be reached"},
	BarrierClosed:      {ExitRejected, "the run's barrier is not open (not every rank has attested)"},
	StepRegression:     {ExitRejected, "a checkpoint step is lower than one already admitted"},
	StaleEpoch:         {ExitRejected, "an attestation names an assignment epoch a reassignment has replaced; verify the new assignment and attest again"},
	DataDirInUse:       {ExitError, "the gate's data directory is held by another running gate process"},
	Unauthenticated:    {ExitUsage, "the gate requires a token and the request carries none or another (--gate-token-file)"},
	UnknownPermit:      {ExitRejected, "no such permit (pruned, or never issued)"},
	GateHalted:         {ExitError, "this gate member stopped applying the log at a committed command or a snapshot its build cannot decode (a newer build's) and serves no client: upgrade it and restart it on its data directory"},
	ClusterVersion:     {ExitError, "the gate cluster's command-schema version is below what the request needs (a member not upgraded yet), or above this member's build"},
	FenceLogMismatch:   {ExitRejected, "the tombstone log or benchmark registry checked is not the one the gate's fence was advanced with: its entries up to the fence differ (prefix digest), or it is not named"},
	ClusterIDMismatch:  {ExitError, "a Raft connection between gate members was refused: the other end belongs to another gate cluster (another cluster identity: a member of the cluster a backup was taken from, or one founded by mistake), or presents none where this cluster checks it"},

	// Gate: evidence signatures (gate serve --verifier-keys).
	EvidenceUnsigned:         {ExitRejected, "the gate requires a trusted verifier's signature of a report or recheck (gate serve --verifier-keys) and the command carries none by a key it trusts"},
	EvidenceSignatureInvalid: {ExitRejected, "a signature a command carries is malformed, or one by a trusted verifier key does not verify over the command's fields (changed since signed, or made for other evidence)"},

	// Trainer cache (worker --cache-max-bytes, cache prune).
	CacheTooSmall: {ExitUsage, "a worker's assigned shards alone (their sizes in the root manifest) exceed its cache bound (--cache-max-bytes); retrying does not help"},
	CacheFull:     {ExitError, "the cache cannot be brought within its bound: what is left is entries live workers hold, this worker's own shards, and temp files being written"},

	// Generic.
	Usage:    {ExitUsage, "bad command-line usage"},
	Internal: {ExitError, "an internal error; please report it"},
	IO:       {ExitError, "an I/O error"},
	Canceled: {ExitError, "the operation was canceled"},
}

// The codes. See the catalogue for their meanings.
const (
	DigestMismatch      Code = "DIGEST_MISMATCH"
	SizeMismatch        Code = "SIZE_MISMATCH"
	LogicalMismatch     Code = "LOGICAL_MISMATCH"
	CountMismatch       Code = "COUNT_MISMATCH"
	FooterCorrupt       Code = "FOOTER_CORRUPT"
	DecodeError         Code = "DECODE_ERROR"
	SchemaMismatch      Code = "SCHEMA_MISMATCH"
	VersionMissing      Code = "VERSION_MISSING"
	TupleRootMismatch   Code = "TUPLE_ROOT_MISMATCH"
	MissingMember       Code = "MISSING_MEMBER"
	ExtraMember         Code = "EXTRA_MEMBER"
	DuplicateMember     Code = "DUPLICATE_MEMBER"
	ContentSubstitution Code = "CONTENT_SUBSTITUTION"
	SourceVersionChange Code = "SOURCE_VERSION_CHANGE"
	SourceIDChange      Code = "SOURCE_ID_CHANGE"
	SplitConflict       Code = "SPLIT_CONFLICT"
	SchemaMix           Code = "SCHEMA_MIX"
	TombstoneHit        Code = "TOMBSTONE_HIT"
	BenchmarkHit        Code = "BENCHMARK_HIT"

	BadDigest          Code = "BAD_DIGEST"
	BadDocument        Code = "BAD_DOCUMENT"
	BadCount           Code = "BAD_COUNT"
	TotalsMismatch     Code = "TOTALS_MISMATCH"
	DocumentTooLarge   Code = "DOCUMENT_TOO_LARGE"
	BadInput           Code = "BAD_INPUT"
	WatermarkUnchecked Code = "WATERMARK_UNCHECKED"

	PreconditionFailed Code = "PRECONDITION_FAILED"
	NotFound           Code = "NOT_FOUND"
	BadKey             Code = "BAD_KEY"
	StoreUnavailable   Code = "STORE_UNAVAILABLE"
	VersioningOff      Code = "VERSIONING_OFF"
	Nondeterminism     Code = "NONDETERMINISM"
	ShuffleCorrupt     Code = "SHUFFLE_CORRUPT"
	TaskNotReady       Code = "TASK_NOT_READY"
	FileLimit          Code = "FILE_LIMIT"
	JobInUse           Code = "JOB_IN_USE"
	StoreDenied        Code = "STORE_DENIED"
	NoSuchBucket       Code = "NO_SUCH_BUCKET"

	GenerationConflict Code = "GENERATION_CONFLICT"
	PublishConflict    Code = "PUBLISH_CONFLICT"
	NotVerified        Code = "NOT_VERIFIED"
	FenceBehind        Code = "FENCE_BEHIND"
	FenceRegression    Code = "FENCE_REGRESSION"
	PermitClosed       Code = "PERMIT_CLOSED"
	RollbackIneligible Code = "ROLLBACK_INELIGIBLE"
	RootMismatch       Code = "ROOT_MISMATCH"
	ShardNotAssigned   Code = "SHARD_NOT_ASSIGNED"
	BarrierTimeout     Code = "BARRIER_TIMEOUT"
	RunFailed          Code = "RUN_FAILED"
	UnknownAlias       Code = "UNKNOWN_ALIAS"
	UnknownRelease     Code = "UNKNOWN_RELEASE"
	UnknownRun         Code = "UNKNOWN_RUN"
	RunPruned          Code = "RUN_PRUNED"
	AlreadyExists      Code = "ALREADY_EXISTS"
	NotLeader          Code = "NOT_LEADER"
	Indeterminate      Code = "INDETERMINATE"
	GateUnavailable    Code = "GATE_UNAVAILABLE"
	BarrierClosed      Code = "BARRIER_CLOSED"
	StepRegression     Code = "STEP_REGRESSION"
	StaleEpoch         Code = "STALE_EPOCH"
	DataDirInUse       Code = "DATA_DIR_IN_USE"
	Unauthenticated    Code = "UNAUTHENTICATED"
	UnknownPermit      Code = "UNKNOWN_PERMIT"
	GateHalted         Code = "GATE_HALTED"
	ClusterVersion     Code = "CLUSTER_VERSION"
	FenceLogMismatch   Code = "FENCE_LOG_MISMATCH"
	ClusterIDMismatch  Code = "CLUSTER_ID_MISMATCH"

	EvidenceUnsigned         Code = "EVIDENCE_UNSIGNED"
	EvidenceSignatureInvalid Code = "EVIDENCE_SIGNATURE_INVALID"

	CacheTooSmall Code = "CACHE_TOO_SMALL"
	CacheFull     Code = "CACHE_FULL"

	Usage    Code = "USAGE"
	Internal Code = "INTERNAL"
	IO       Code = "IO"
	Canceled Code = "CANCELED"
)

// Known reports whether c is in the catalogue.
func Known(c Code) bool { _, ok := catalogue[c]; return ok }

// Meaning returns the one-line meaning of c, or "" if c is unknown.
func (c Code) Meaning() string { return catalogue[c].meaning }

// Exit returns the CLI exit status for c; unknown codes map to ExitError.
func (c Code) Exit() int {
	if e, ok := catalogue[c]; ok {
		return e.exit
	}
	return ExitError
}

// All returns every code in the catalogue (unordered).
func All() []Code {
	out := make([]Code, 0, len(catalogue))
	for c := range catalogue {
		out = append(out, c)
	}
	return out
}

// Error is an error with a stable code. Err, when set, is the cause.
type Error struct {
	Code Code
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	switch {
	case e.Msg != "" && e.Err != nil:
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Msg, e.Err)
	case e.Msg != "":
		return fmt.Sprintf("%s: %s", e.Code, e.Msg)
	case e.Err != nil:
		return fmt.Sprintf("%s: %v", e.Code, e.Err)
	}
	return string(e.Code)
}

func (e *Error) Unwrap() error { return e.Err }

// Is lets errors.Is(err, errcode.New(c, "")) match by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.Err == nil && t.Code == e.Code
}

// New returns an error with code c and a formatted message.
func New(c Code, format string, args ...any) error {
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...)}
}

// Wrap returns an error with code c wrapping err, or nil if err is nil.
func Wrap(c Code, err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...), Err: err}
}

// Coder is implemented by typed errors that carry their own code
// (for example *objstore.DigestMismatchError).
type Coder interface {
	ErrorCode() Code
}

// Of returns the code of the first error in err's chain that has one, or
// Internal if none does, or "" if err is nil.
func Of(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	var c Coder
	for cur := err; cur != nil; cur = errors.Unwrap(cur) {
		if errors.As(cur, &e) && e == cur {
			return e.Code
		}
		if cc, ok := cur.(Coder); ok {
			return cc.ErrorCode()
		}
	}
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.As(err, &c) {
		return c.ErrorCode()
	}
	return Internal
}
