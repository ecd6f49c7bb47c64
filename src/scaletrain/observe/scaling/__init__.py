"""A scaling study: `scaletrain scale`.

study (the design, one size's measured point, the table), fit (the model that predicts
larger sizes), report (markdown and plots).
"""
