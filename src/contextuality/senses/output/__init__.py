"""The output layer read at every layer: the logit lens, B1-B5 and their masked counterparts."""
