#!/usr/bin/perl

# access_log buffer= flush= gzip: lines wait in the worker's buffer until the
# next would not fit, until flush= passes (with no more requests), until USR1
# (written to the old file) and until the worker stops (QUIT, TERM, a
# reload's old worker); gzip
# writes one gzip member per flush, the file reads whole with a multi-member
# gunzip; a stream access_log buffers the same way. Bad sizes, levels, times
# and conflicting buffers are refused with file and line.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time sleep/;
use IO::Socket::INET;
use IO::Uncompress::Gunzip qw/gunzip $GunzipError/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http stream/)->plan(29);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 1;

events {
}

http {
    log_format u '$uri';
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location /t/ {
            access_log %%TESTDIR%%/timed.log u buffer=4k flush=3s;
            return 200 "ok";
        }
        location /f/ {
            access_log %%TESTDIR%%/full.log u buffer=200;
            return 200 "ok";
        }
        location /z/ {
            access_log %%TESTDIR%%/z.log u gzip=9;
            return 200 "ok";
        }
        location /zf/ {
            access_log %%TESTDIR%%/zf.log u gzip flush=1s;
            return 200 "ok";
        }
    }
}

stream {
    log_format s 'stream $server_port $status';

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        access_log %%TESTDIR%%/stream.log s buffer=4k;
        return "hi\n";
    }
}

EOF

$t->run();
$t->started_workers();

sub content { my $c = $t->read_file($_[0]); defined $c ? $c : '' }

# 40 bytes with the newline: five fill a 200-byte buffer exactly.
sub fill { sprintf("/f/%02d%s", $_[0], 'x' x 34) }

sub gunzip_all {
	my ($file, $multi) = @_;
	my $z = content($file);
	my $out = '';
	gunzip(\$z => \$out, MultiStream => $multi) or return "error: $GunzipError";
	return $out;
}

# flush=3s: not at once, then written by the timer with no further request.
my $t0 = time();
like(http_get('/t/1'), qr/200 OK/, 'timed request');
my $early = content('timed.log');
my $quick = time() - $t0 < 2.5;
SKIP: {
	skip 'the request took too long to look before the flush', 1 unless $quick;
	is($early, '', 'line held back until flush=');
}
my $seen;
poll_until(sub {
	if (content('timed.log') =~ m!^/t/1\n!m) { $seen = time(); return 1 }
	return 0;
}, 20);
ok($seen, 'line written by the flush= timer');
cmp_ok(($seen // 0) - $t0, '>=', 2.9, 'not before flush= passed');

# buffer=200: five 40-byte lines fit, the sixth writes them.
http_get(fill($_)) for 1 .. 5;
is(content('full.log'), '', 'lines held while the buffer has room');
http_get(fill(6));
is(content('full.log'), join('', map { fill($_) . "\n" } 1 .. 5),
	'buffer written when the next line does not fit');

# gzip=9 (64k buffer, no flush): nothing until USR1.
http_get('/z/a');
http_get('/z/b');
is(content('z.log'), '', 'gzip lines buffered');

# gzip with flush=1s: one member, written by the timer.
http_get('/zf/1');
ok(poll_until(sub { -s "$d/zf.log" }, 15), 'gzip buffer flushed by timer');
is(gunzip_all('zf.log', 1), "/zf/1\n", 'gzip member decompresses to the line');

# A stream session's line is buffered too.
my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8081), Timeout => 5);
my $got = '';
if ($s) {
	while ($s->sysread(my $b, 100)) { $got .= $b }
	close $s;
}
is($got, "hi\n", 'stream session');
sleep 0.3;
is(content('stream.log'), '', 'stream line buffered');

# USR1: the buffer goes to the old file before the worker re-opens.
rename("$d/full.log", "$d/full.log.1") or die "rename: $!";
my $reopens = $t->log_count(qr/reopening logs/);
$t->signal('USR1');
ok($t->waitforlog(sub { my $n = () = $_[0] =~ /reopening logs/g; $n >= $reopens + 2 }, 10),
	'workers and master reopened');
ok(poll_until(sub { content('full.log.1') =~ /^\Q${\fill(6)}\E$/m }, 10),
	'USR1 writes the buffer to the old file');
is(content('full.log.1'), join('', map { fill($_) . "\n" } 1 .. 6), 'old file whole');
ok(-e "$d/full.log" && content('full.log') eq '', 'new file opened empty');
ok(poll_until(sub { -s "$d/z.log" }, 10), 'USR1 flushes the gzip buffer');

# A reload: the old worker writes its buffers as it stops.
http_get(fill(7));
http_get('/z/c');
ok($t->reload(), 'reloaded');
ok(poll_until(sub { content('full.log') eq fill(7) . "\n" }, 15),
	'old worker writes its buffer when a reload stops it');
http_get(fill(8));
http_get('/z/d');
http_get('/t/2');

# A graceful stop writes every buffer.
$t->stop();
is(content('full.log'), fill(7) . "\n" . fill(8) . "\n", 'QUIT writes the buffer');
like(content('timed.log'), qr!^/t/1\n/t/2\n\z!, 'QUIT writes the flush= buffer');
is(content('stream.log'), 'stream ' . port(8081) . " 200\n", 'stream buffer written at stop');
is(gunzip_all('z.log', 1), "/z/a\n/z/b\n/z/c\n/z/d\n", 'gzip file decompresses whole');
is(gunzip_all('z.log', 0), "/z/a\n/z/b\n", 'first gzip member is the first flush');

# A fast stop (TERM) loses nothing either.
$t->run();
$t->started_workers();
http_get(fill(9));
http_get('/z/e');
is(content('full.log'), fill(7) . "\n" . fill(8) . "\n", 'held before TERM');
$t->signal('TERM');
ok($t->wait_exit(10), 'TERM stops');
is(content('full.log'), join('', map { fill($_) . "\n" } 7 .. 9), 'TERM writes the buffer');
is(gunzip_all('z.log', 1), "/z/a\n/z/b\n/z/c\n/z/d\n/z/e\n", 'gzip member after TERM');

# Errors, with file and line.
my @cases = (
	['buffer=abc', qr/invalid buffer size "abc"/],
	['buffer=0', qr/invalid buffer size "0"/],
	['gzip=10', qr/invalid compression level "10"/],
	['gzip=x', qr/invalid compression level "x"/],
	['flush=0', qr/invalid flush time "0"/],
	['flush=1s', qr/no buffer is defined for access_log "\S+x\.log"/],
	["buffer=4k;\n    access_log $d/x.log combined buffer=8k",
		qr/access_log "\S+x\.log" already defined with conflicting parameters/],
	["gzip;\n    access_log $d/x.log combined gzip=2",
		qr/access_log "\S+x\.log" already defined with conflicting parameters/],
	# Not nginx's: sluice's log files are opened once, by the master.
	["buffer=4k;\n    access_log $d/\$host.log",
		qr/variables in the access_log path "\S+\$host\.log" are not supported/],
);
my @bad;
for my $case (@cases) {
	$t->write_file_expand('sluice.conf', <<"EOF");
%%TEST_GLOBALS%%
events {
}
http {
    access_log $d/x.log combined $case->[0];
}
EOF
	my (undef, undef, $err) = $t->run_binary('-t', '-p', "$d/", '-c', "$d/sluice.conf");
	push @bad, "$case->[0]: $err" unless $err =~ /\[emerg\] $case->[1] in \S+sluice\.conf:\d+$/m;
}
is(join("\n", @bad), '', 'bad parameters refused with file:line');

# The same buffer twice, and an unbuffered line to a buffered file, are fine.
$t->write_file_expand('sluice.conf', <<"EOF");
%%TEST_GLOBALS%%
events {
}
http {
    access_log $d/x.log combined buffer=4k gzip=3;
    server {
        access_log $d/x.log combined buffer=4k gzip=3;
        access_log $d/x.log;
    }
}
EOF
my ($code) = $t->run_binary('-t', '-p', "$d/", '-c', "$d/sluice.conf");
is($code, 0, 'agreeing buffers accepted');
