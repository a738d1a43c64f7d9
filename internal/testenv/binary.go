package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// TetraBinary builds workload/cmd/tetra once per test binary run and
// returns its path, for tests that run `tetra serve` as a child process
// (killing it is the point). A package using it calls RemoveBinary from its
// TestMain after m.Run.
func TetraBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "tetra-test-bin-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "tetra")
		out, err := exec.Command("go", "build", "-o", buildBin, "github.com/tetra-messenger/tetra/workload/cmd/tetra").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// RemoveBinary deletes what TetraBinary built, if anything.
func RemoveBinary() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}
