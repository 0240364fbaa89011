package harness_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tests/harness"
)

const healthz = "github.com/warmpath/warmpath/tests/harness/internal/healthz"

func TestMain(m *testing.M) { harness.Main(m) }

func TestStart(t *testing.T) {
	// Two containers from one package: the second reuses the image.
	for _, arg := range []string{"first", "second"} {
		t.Run(arg, func(t *testing.T) {
			c := harness.Start(t, harness.Spec{
				Package:    healthz,
				Args:       []string{"--port", "9000", arg},
				Port:       "9000",
				HealthPath: "/health",
			})
			if got := get(t, c.URL+"/args"); !strings.Contains(got, arg) {
				t.Errorf("GET /args = %q, want it to contain %q", got, arg)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			logs, err := c.Logs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(logs, "healthz listening") {
				t.Errorf("logs = %q, want the start-up line", logs)
			}
		})
	}
}

func TestImageIsCachedByContent(t *testing.T) {
	a := harness.Image(t, healthz, "9000")
	b := harness.Image(t, healthz, "9000")
	if a != b {
		t.Errorf("Image twice = %q, %q; want one tag", a, b)
	}
	if c := harness.Image(t, healthz, "9001"); c == a {
		t.Errorf("Image with another port = %q, want a different tag", c)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}
