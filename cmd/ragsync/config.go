package main

import (
	"github.com/ragsync/ragsync/config"
	"github.com/ragsync/ragsync/fallback"
)

// Config is ragsync.yaml (package config) as the commands use it.
type Config struct{ config.Config }

// LogConfig is the log: section.
type LogConfig = config.LogConfig

// frontDoorConfig is the front door's configuration (config's
// FrontDoorConfig), under the name the dead-letter commands use.
func (c Config) frontDoorConfig() fallback.Config { return c.FrontDoorConfig() }
