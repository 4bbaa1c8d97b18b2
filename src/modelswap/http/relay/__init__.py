"""The data path: find the model in the body, apply filters, wait for the backend, relay the answer
(streams included).
"""
