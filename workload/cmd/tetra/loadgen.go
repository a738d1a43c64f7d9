package main

import (
	"errors"
	"io"
)

func loadgenCmd(args []string, stdout, stderr io.Writer) error {
	return errors.New("loadgen: not built yet")
}
