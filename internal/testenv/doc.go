// Package testenv gives tests their outside services: a fresh PostgreSQL
// database and a Redis key prefix per test, each cleaned up afterwards, so
// tests run in parallel and leave nothing behind.
//
// When a service is not reachable, the test is skipped with a loud message
// naming what is missing and how to start it; with CI=true (as .ci/run sets)
// it fails instead, so nothing is silently skipped in CI.
//
// Addresses: TETRA_TEST_POSTGRES (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable) and
// TETRA_TEST_REDIS (default redis://127.0.0.1:6379/0).
package testenv
