package main

import "errors"

func benchCmd(args []string) error { return errors.New("bench: see benchmarks/") }
