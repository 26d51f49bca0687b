#!/usr/bin/perl

# Request bodies larger than client_body_buffer_size go to a temporary file
# in client_body_temp_path, as nginx keeps them, not to memory: the upstream
# gets every byte (Content-Length and chunked bodies, and again on a retry),
# nginx's [warn] line names the file, nothing is left in the directory, and
# many large bodies arriving at once do not grow the worker.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(20);

my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<"EOF");

%%TEST_GLOBALS%%

worker_processes 1;

events {
}

http {
    access_log off;
    client_max_body_size 4m;
    client_body_buffer_size 1k;

    upstream retry {
        server 127.0.0.1:%%PORT_8082%%;
        server 127.0.0.1:%%PORT_8081%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location /echo { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
        location /own/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%/echo;
            client_body_temp_path $d/own_temp 1 2;
        }
        location /big-buffer/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%/echo;
            client_body_buffer_size 1m;
        }
        location /retry {
            proxy_pass http://retry/echo;
            proxy_next_upstream http_502 non_idempotent;
        }
        location /hold { proxy_pass http://127.0.0.1:%%PORT_8081%%/echo; }
    }
}

EOF

$t->backend(port(8081));
$t->raw_backend(port(8082), '/echo' => "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
$t->run();

ok(-d "$d/client_body_temp", 'the default client_body_temp is created at start');
ok(-d "$d/own_temp", 'a named client_body_temp_path is created at start');

my $body = join '', map { sprintf "%07d\n", $_ } 1 .. 25_000;    # 200,000 bytes

sub post {
	my ($uri, $data, %o) = @_;
	my $head = "POST $uri HTTP/1.0\r\nHost: localhost\r\n";
	if ($o{chunked}) {
		my $c = '';
		for (my $i = 0; $i < length $data; $i += 30_000) {
			my $part = substr($data, $i, 30_000);
			$c .= sprintf("%x\r\n%s\r\n", length $part, $part);
		}
		return http("POST $uri HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
			. "Transfer-Encoding: chunked\r\n\r\n$c" . "0\r\n\r\n", raw => 1, timeout => 20);
	}
	return http($head . "Content-Length: " . length($data) . "\r\n\r\n$data", raw => 1,
		timeout => 20);
}

# The echo backend answers with the request head and body it received.
my $r = post('/echo', $body);
like($r, qr/^HTTP\/1.1 200 /, 'spooled body: 200');
like($r, qr/Content-Length: 200000\r\n/i, 'spooled body: sent with its length');
ok(index($r, "\r\n\r\n$body") >= 0, 'spooled body: every byte reached the upstream');
ok($t->waitforlog(qr/\[warn\] .*a client request body is buffered to a temporary file \Q$d\E\/client_body_temp\/\d{10}, client: 127.0.0.1/),
	'logged as nginx');

$r = post('/echo', $body, chunked => 1);
like($r, qr/^HTTP\/1.1 200 /, 'spooled chunked body: 200');
like($r, qr/Content-Length: 200000\r\n/i, 'spooled chunked body: sent with its length');
ok(index($r, "\r\n\r\n$body") >= 0, 'spooled chunked body: every byte reached the upstream');

$r = post('/own/', $body);
ok(index($r, "\r\n\r\n$body") >= 0, 'client_body_temp_path: body whole');
ok($t->waitforlog(qr/buffered to a temporary file \Q$d\E\/own_temp\/\d{10}/),
	'client_body_temp_path: the file was made there');

# The first peer answers 502: the retry sends the whole body again.
$r = post('/retry', $body);
like($r, qr/^HTTP\/1.1 200 /, 'retry with a spooled body: 200 from the second peer');
ok(index($r, "\r\n\r\n$body") >= 0, 'retry with a spooled body: every byte again');
my @first = grep { $_->[2] eq '/echo' } $t->raw_log(port(8082));
is(scalar(@first) && $first[0][3], 200000, 'retry: the first peer got the whole body too');

# A body within client_body_buffer_size stays in memory: no file, no line.
my $warns = () = $t->read_file('error.log') =~ /request body is buffered to a temporary file/g;
$r = post('/big-buffer/', $body);
ok(index($r, "\r\n\r\n$body") >= 0, 'body within the buffer: whole');
my $after = () = $t->read_file('error.log') =~ /request body is buffered to a temporary file/g;
is($after, $warns, 'body within the buffer: no temporary file');

my @left = (glob("$d/client_body_temp/*"), glob("$d/own_temp/*"));
is(scalar @left, 0, 'nothing left in the temp directories');

# 20 clients each send 1 MB and hold the last byte: the worker's memory
# does not grow by their bodies (without spooling it grows by ~20 MB).
{
	my ($worker) = $t->worker_pids();
	my $rss = sub {
		open my $fh, '<', "/proc/$worker/status" or return 0;
		my ($kb) = join('', <$fh>) =~ /^VmRSS:\s+(\d+)/m;
		return $kb // 0;
	};
	my $mb = 'm' x (1024 * 1024);
	# Warm up: one such request first, so the allocator's own growth is
	# not counted.
	post('/hold', $mb);
	my $before = $rss->();
	my @held;
	for (1 .. 20) {
		my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Timeout => 5)
			or last;
		$s->blocking(1);
		$s->syswrite("POST /hold HTTP/1.0\r\nHost: localhost\r\nContent-Length: "
			. (length($mb) + 1) . "\r\n\r\n");
		my $off = 0;
		while ($off < length $mb) {
			my $n = $s->syswrite($mb, 65536, $off) or last;
			$off += $n;
		}
		push @held, $s;
	}
	is(scalar @held, 20, '20 large bodies sent but for their last byte');
	# Let the worker read what is in flight.
	poll_until(sub { my @f = glob("$d/client_body_temp/*"); 0 }, 1);
	my $grown = $rss->() - $before;
	cmp_ok($grown, '<', 8 * 1024, "worker grew by ${grown} kB for 20 MB of bodies");
	$_->syswrite('m') for @held;
	my $ok = 0;
	for my $s (@held) {
		my $resp = http_end($s, timeout => 20);
		$ok++ if $resp =~ /^HTTP\/1.1 200 / && length($resp) > 1024 * 1024;
	}
	is($ok, 20, 'then all 20 answered whole');
}
