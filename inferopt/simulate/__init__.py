"""The serving simulator (issue 18): a cost model fitted from measured runs, a scheduler simulation, calibration."""
