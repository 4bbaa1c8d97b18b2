"""What each URL answers: the OpenAI/Anthropic routes, admin, observation, security, plan, peers,
and the catalog they share.
"""
