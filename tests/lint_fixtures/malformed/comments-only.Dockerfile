# only comments

# FROM python:3.11
