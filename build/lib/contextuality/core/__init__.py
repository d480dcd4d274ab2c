"""What every stage shares: job logging and expected errors, atomic writes, disk reservations."""
