package s3test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// The root credentials of the test gateway. Start exports them to the
// test's environment, where the AWS credential chain finds them.
const (
	AccessKey = "shardproof-test"
	SecretKey = "shardproof-test-secret"
	Region    = "us-east-1"
)

// VersitygwVersion is the gateway version pinned in tools/go.mod.
const VersitygwVersion = "v1.8.0"

type server struct {
	endpoint string
	dataDir  string
	cmd      *exec.Cmd
	exited   chan error
	err      error
}

var (
	once    sync.Once
	srv     server
	buckets atomic.Int64
)

// Start returns the URL of a new, empty, versioned bucket on the shared
// test gateway (starting it on first use), e.g.
// "s3://sp-3/?endpoint=http://127.0.0.1:41234&region=us-east-1", and sets
// the AWS credential environment for the calling test. If the gateway
// cannot be built or started the test is skipped, or fails when CI=true.
func Start(t testing.TB) string {
	return NewBucket(t, true)
}

// NewBucket is Start with the bucket's versioning chosen: versioned=false
// leaves versioning never enabled, for testing that stores refuse it.
func NewBucket(t testing.TB, versioned bool) string {
	t.Helper()
	once.Do(func() { srv.err = srv.start() })
	if srv.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("s3test: versitygw unavailable (CI=true forbids skipping): %v", srv.err)
		}
		t.Skipf("s3test: versitygw unavailable: %v", srv.err)
	}
	setEnv(t)
	client := Client(srv.endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bucket := fmt.Sprintf("sp-%d-%d", os.Getpid(), buckets.Add(1))
	if _, err := client.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("s3test: create bucket %s: %v", bucket, err)
	}
	if versioned {
		_, err := client.PutBucketVersioning(ctx, &awss3.PutBucketVersioningInput{
			Bucket:                  aws.String(bucket),
			VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled},
		})
		if err != nil {
			t.Fatalf("s3test: enable versioning on %s: %v", bucket, err)
		}
	}
	return fmt.Sprintf("s3://%s/?endpoint=%s&region=%s", bucket, url.QueryEscape(srv.endpoint), Region)
}

// Endpoint returns the running gateway's endpoint URL, or "" before Start.
func Endpoint() string { return srv.endpoint }

// Client returns an S3 client for endpoint with the test credentials, for
// tests that manipulate buckets directly.
func Client(endpoint string) *awss3.Client {
	return awss3.New(awss3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
	})
}

// setEnv points the AWS SDK's default chain at the test credentials and
// away from any configuration on the host.
func setEnv(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", Region)
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	none := filepath.Join(os.TempDir(), "shardproof-s3test-no-aws-config")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
}

// Stop kills the gateway and removes its data. Tests need not call it: the
// gateway dies with the test binary (Pdeathsig). A TestMain may call it
// after m.Run to also remove the data directory.
func Stop() {
	if srv.cmd != nil {
		srv.cmd.Process.Kill()
		<-srv.exited
	}
	if srv.dataDir != "" {
		os.RemoveAll(srv.dataDir)
	}
}

// Binary returns the path of the versitygw binary, building it on first
// use into the Go build cache (the first build takes minutes; later ones
// reuse it). $SHARDPROOF_VERSITYGW overrides the path.
func Binary() (string, error) {
	if p := os.Getenv("SHARDPROOF_VERSITYGW"); p != "" {
		return p, nil
	}
	gocache, err := goEnv("GOCACHE")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(gocache, "shardproof-versitygw", "versitygw-"+VersitygwVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	// Test binaries of several packages start at once under `go test ./...`;
	// one builds (minutes on a small machine), the others wait for it.
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := lockFile(lock); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	gomod, err := goEnv("GOMOD")
	if err != nil {
		return "", err
	}
	tools := filepath.Join(filepath.Dir(gomod), "tools")
	if _, err := os.Stat(filepath.Join(tools, "go.mod")); err != nil {
		return "", fmt.Errorf("tools module not found next to %s: %w", gomod, err)
	}
	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid())
	build := exec.Command("go", "-C", tools, "build", "-o", tmp, "github.com/versity/versitygw/cmd/versitygw")
	if out, err := build.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("build versitygw: %v\n%s", err, out)
	}
	// Rename is atomic, so concurrent test binaries never run a half-written file.
	return bin, os.Rename(tmp, bin)
}

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" || v == os.DevNull {
		return "", fmt.Errorf("go env %s is empty (run tests inside the module)", name)
	}
	return v, nil
}

func (s *server) start() error {
	if err := supported(); err != nil {
		return err
	}
	bin, err := Binary()
	if err != nil {
		return err
	}
	removeStale()
	s.dataDir, err = os.MkdirTemp("", fmt.Sprintf("shardproof-versitygw-%d-", os.Getpid()))
	if err != nil {
		return err
	}
	root, vers := filepath.Join(s.dataDir, "root"), filepath.Join(s.dataDir, "versions")
	for _, d := range []string{root, vers} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	var lastErr error
	for range 3 { // the free port may be taken between probe and listen
		addr, err := freePort()
		if err != nil {
			return err
		}
		if lastErr = s.run(bin, addr, root, vers); lastErr == nil {
			return nil
		}
	}
	return lastErr
}

func (s *server) run(bin, addr, root, vers string) error {
	logf, err := os.Create(filepath.Join(s.dataDir, "versitygw.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "--port", addr, "--access", AccessKey, "--secret", SecretKey,
		"--region", Region, "--health", "/health", "--quiet",
		"posix", "--versioning-dir", vers, root)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The gateway must not outlive the test binary (dieWithParent): start
	// it from a thread that never exits.
	dieWithParent(cmd)
	started := make(chan error)
	go func() {
		runtime.LockOSThread()
		started <- cmd.Start()
		select {} // keep the thread, and so the child, alive
	}()
	if err := <-started; err != nil {
		logf.Close()
		return fmt.Errorf("start versitygw: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logf.Close() }()
	endpoint := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("versitygw exited: %v\n%s", err, log)
		default:
		}
		resp, err := http.Get(endpoint + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.cmd, s.endpoint, s.exited = cmd, endpoint, exited
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
	return errors.New("versitygw did not become healthy within 30s")
}

// removeStale deletes data directories left by test binaries that died
// without Stop (the gateway itself died with them).
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "shardproof-versitygw-*-*"))
	for _, d := range dirs {
		f := strings.SplitN(strings.TrimPrefix(filepath.Base(d), "shardproof-versitygw-"), "-", 2)
		pid, err := strconv.Atoi(f[0])
		if err == nil && pid > 0 && processGone(pid) {
			os.RemoveAll(d)
		}
	}
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
