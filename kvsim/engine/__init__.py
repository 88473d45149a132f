"""The discrete-event serving engine: sequences, scheduler, latency models, simulation loop."""
