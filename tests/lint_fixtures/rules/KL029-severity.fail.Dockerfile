# KL029's severity follows what the redirection does: `<=` reads a file that does not exist, so the
# command fails (error); `>=` loses the lower bound (warning), and with --upgrade the newest release
# meets it anyway (info).
FROM python:3.11-slim
# expect: KL029
RUN pip install --no-cache-dir numpy<=2.0
# expect: KL029
RUN pip install --no-cache-dir -U packaging>=24.0
USER 1000:1000
