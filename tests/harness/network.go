package harness

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
)

// networkRemoveTimeout bounds the removal of a network, retries included.
const networkRemoveTimeout = 30 * time.Second

// Network is a user-defined Docker bridge network. Containers started with
// Spec.Network set join it and reach one another by their Spec.Aliases
// through Docker's embedded DNS, which the default bridge network lacks.
type Network struct {
	// Name is the Docker network's (random) name.
	Name string

	nw *testcontainers.DockerNetwork
}

// NewNetwork creates a network, labelled LabelTest, that is removed when the
// test ends. Cleanups run last-in first-out, so every container started on
// it later in the same test (or in its subtests) is terminated first. Start
// containers on it only from the test that created it or from its subtests.
func NewNetwork(t testing.TB) *Network {
	t.Helper()
	RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nw, err := network.New(ctx, network.WithLabels(map[string]string{LabelTest: "true"}))
	if err != nil {
		t.Fatalf("harness: create network: %v", err)
	}
	t.Cleanup(func() {
		if err := removeNetwork(nw); err != nil {
			t.Errorf("harness: remove network %s: %v", nw.Name, err)
		}
	})
	return &Network{Name: nw.Name, nw: nw}
}

// removeNetwork removes nw, retrying briefly while the daemon still holds an
// endpoint of a container that was just removed. A network that is already
// gone counts as removed.
func removeNetwork(nw *testcontainers.DockerNetwork) error {
	ctx, cancel := context.WithTimeout(context.Background(), networkRemoveTimeout)
	defer cancel()
	for {
		err := nw.Remove(ctx)
		switch {
		case err == nil || errdefs.IsNotFound(err):
			return nil
		case !strings.Contains(err.Error(), "active endpoints"):
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
