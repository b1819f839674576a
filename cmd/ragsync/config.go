package main

import "github.com/ragsync/ragsync/config"

// Config is ragsync.yaml (package config) as the commands use it.
type Config struct{ config.Config }

// LogConfig is the log: section.
type LogConfig = config.LogConfig
