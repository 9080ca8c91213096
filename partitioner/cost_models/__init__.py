"""Cost models: time of units on a device, of bytes over links, and memory of a placement."""
