FROM python:3.11-slim-bookworm
RUNN pip install numpy
