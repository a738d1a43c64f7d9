package config

import "testing"

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://tetra:s3cret@db:5432/tetra?sslmode=disable": "postgres://tetra:xxxxx@db:5432/tetra?sslmode=disable",
		"redis://:pw@redis:6379/0":                              "redis://:xxxxx@redis:6379/0",
		"redis://redis:6379/0":                                  "redis://redis:6379/0",
		"postgres://tetra@db/x":                                 "postgres://tetra@db/x",
		"kafka://a:9092,b:9092/topic":                           "kafka://a:9092,b:9092/topic",
		"postgres://u:p%zz@db/x":                                "postgres://xxxxx@db/x", // does not parse
		"sqlite":                                                "sqlite",
		"":                                                      "",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
