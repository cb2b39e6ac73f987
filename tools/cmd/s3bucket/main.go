// Command s3bucket waits for an S3 endpoint to answer, then creates a bucket
// (if absent) and enables versioning on it. `make s3-up` runs it against the
// local versitygw so that `shardproof --store s3://…` works at once.
//
//	go -C tools run ./cmd/s3bucket -endpoint http://127.0.0.1:7070 -bucket shardproof
//
// Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

func main() {
	endpoint := flag.String("endpoint", "http://127.0.0.1:7070", "S3 endpoint URL")
	bucket := flag.String("bucket", "shardproof", "bucket to create with versioning")
	region := flag.String("region", "us-east-1", "region")
	health := flag.String("health", "/health", "health path to poll before creating (empty: none)")
	flag.Parse()
	if err := run(*endpoint, *bucket, *region, *health); err != nil {
		fmt.Fprintln(os.Stderr, "s3bucket:", err)
		os.Exit(1)
	}
}

func run(endpoint, bucket, region, health string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if health != "" {
		for {
			resp, err := http.Get(endpoint + health)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s%s not healthy: %v", endpoint, health, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	c := s3.New(s3.Options{
		Region:       region,
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(
			os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), ""),
	})
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	var ae smithy.APIError
	if err != nil && !(errors.As(err, &ae) && ae.ErrorCode() == "BucketAlreadyOwnedByYou") {
		return fmt.Errorf("create bucket %s: %w", bucket, err)
	}
	_, err = c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{
		Bucket:                  aws.String(bucket),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled},
	})
	if err != nil {
		return fmt.Errorf("enable versioning on %s: %w", bucket, err)
	}
	return nil
}
