// Runs one of the bench's command-line programs as a user would (a plain child process, not a
// test file), for the tests of those programs: its exit code and what it printed.
import { spawn } from 'node:child_process';

export async function runCli(file: string, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT; // else node:test in the child would report to this test run
  const child = spawn(process.execPath, [file, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => (stdout += b));
  child.stderr.on('data', (b: Buffer) => (stderr += b));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, stdout, stderr };
}
