package config

// validateMonitor checks the monitor: section when the monitor is on.
func (c Config) validateMonitor() error {
	if !c.Monitor.On() {
		return nil
	}
	return c.Monitor.WithDefaults().Validate()
}

// monitorBrokers are where events go on Kafka: monitor.brokers, else the
// Kafka source's brokers; none means no Kafka events.
func (c Config) MonitorBrokers() []string {
	if len(c.Monitor.Brokers) > 0 {
		return c.Monitor.Brokers
	}
	return c.sourceBrokers()
}

// monitorRedis is the Redis the events stream goes to: the front door's,
// when the front door is on or frontdoor.redis_url is set.
func (c Config) MonitorRedis() (url, stream string, ok bool) {
	if !c.FrontDoor.Enabled && c.FrontDoor.RedisURL == "" {
		return "", "", false
	}
	f := c.FrontDoorConfig()
	return f.RedisURL, f.Prefix + ":monitor", true
}
