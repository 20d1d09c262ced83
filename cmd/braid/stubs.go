package main

import "errors"

var errNotYet = errors.New("not available yet")

func topicCmd(args []string) error   { return errNotYet }
func produceCmd(args []string) error { return errNotYet }
func consumeCmd(args []string) error { return errNotYet }
func benchCmd(args []string) error   { return errNotYet }
