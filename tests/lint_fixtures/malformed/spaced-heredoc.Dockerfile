# a shell heredoc written with a space after << is no heredoc to BuildKit: its body becomes instructions
FROM python:3.12-slim
RUN mkdir -p /app && \
    cat > /app/main.py << 'PYEOF'
print("hello")
PYEOF
