"""A device job's parts as files and its layers grouped by the device's free memory."""
