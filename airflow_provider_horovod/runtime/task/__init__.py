"""
Runs in each barrier task on an executor (or, for ``np < 0``, in the driver for its local ranks): checks, the rank
plan, the rendezvous, GPU assignment, and the rank processes it starts.
"""
