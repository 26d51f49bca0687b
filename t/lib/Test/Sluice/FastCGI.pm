package Test::Sluice::FastCGI;

# A small FastCGI responder for the tests (IO::Socket only, no CPAN): one
# process forks a child per connection. Each request's answer is chosen by
# its QUERY_STRING:
#   status=NNN   a "Status: NNN" header
#   location=URL a "Location:" header (and no Status)
#   stderr=TEXT  a FCGI_STDERR record with TEXT before the head
#   slow=SECS    wait before answering
#   close=1      close the connection without answering
#   big=N        a body of N bytes of "x" (after the echo)
#   late=TEXT    a FCGI_STDERR record with TEXT after the head, then "tail"
#   fail_on=PORT "Status: 500" from the responder on PORT only
# The body echoes: "port=PORT conn=N keep=0|1", every param as
# "NAME=VALUE" (sorted), then "stdin=" and the request body. With
# FCGI_KEEP_CONN the connection serves the next request, else it is closed.

use warnings;
use strict;

use IO::Socket::INET;
use IO::Socket::UNIX;
use POSIX ();

sub run {
	my ($port, %opts) = @_;
	my $l;
	if ($port =~ m{^/}) {
		unlink $port;
		$l = IO::Socket::UNIX->new(Local => $port, Listen => 128)
			or die "fastcgi $port: $!\n";
		# Workers may run as another user.
		chmod 0777, $port;
	} else {
		$l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Listen => 128,
			ReuseAddr => 1, Proto => 'tcp') or die "fastcgi $port: $!\n";
	}
	if ($opts{ready}) {
		open my $fh, '>', $opts{ready} or die "fastcgi: $!\n";
		close $fh;
	}
	local $SIG{CHLD} = 'IGNORE';
	local $SIG{TERM} = sub { exit 0 };
	my $n = 0;
	while (1) {
		my $c = $l->accept() or next;
		$n++;
		my $pid = fork();
		if (defined $pid && $pid == 0) {
			close $l;
			alarm 30;
			serve($c, $port, $n);
			POSIX::_exit(0);
		}
		close $c;
	}
}

sub read_exact {
	my ($c, $len) = @_;
	my $buf = '';
	while (length $buf < $len) {
		my $got = sysread($c, $buf, $len - length $buf, length $buf);
		return undef unless $got;
	}
	return $buf;
}

sub read_record {
	my ($c) = @_;
	my $h = read_exact($c, 8) // return;
	my ($ver, $type, $id, $len, $pad) = unpack('CCnnC', $h);
	my $content = $len ? read_exact($c, $len) // return : '';
	read_exact($c, $pad) // return if $pad;
	return ($type, $content);
}

sub record {
	my ($type, $content) = @_;
	my $out = '';
	do {
		my $piece = substr($content, 0, 65535, '');
		my $pad = (8 - length($piece) % 8) % 8;
		$out .= pack('CCnnCC', 1, $type, 1, length $piece, $pad, 0) . $piece . ("\0" x $pad);
	} while (length $content);
	return $out;
}

sub pairs {
	my ($data) = @_;
	my %p;
	while (length $data) {
		my @len;
		for (1 .. 2) {
			my $b = ord(substr($data, 0, 1));
			if ($b & 0x80) {
				push @len, unpack('N', substr($data, 0, 4, '')) & 0x7fffffff;
			} else {
				substr($data, 0, 1, '');
				push @len, $b;
			}
		}
		my $name = substr($data, 0, $len[0], '');
		$p{$name} = substr($data, 0, $len[1], '');
	}
	return %p;
}

sub serve {
	my ($c, $port, $n) = @_;
	binmode $c;
	while (1) {
		my ($params, $stdin, $keep) = ('', '', 0);
		my ($params_done, $stdin_done) = (0, 0);
		while (!$params_done || !$stdin_done) {
			my ($type, $content) = read_record($c);
			return unless defined $type;
			if ($type == 1) {
				$keep = (ord(substr($content, 2, 1)) & 1) ? 1 : 0;
			} elsif ($type == 4) {
				if (length $content) { $params .= $content } else { $params_done = 1 }
			} elsif ($type == 5) {
				if (length $content) { $stdin .= $content } else { $stdin_done = 1 }
			}
		}
		my %p = pairs($params);
		my %q = map { my ($k, $v) = split /=/, $_, 2; ($k, $v // '') }
			split /&/, ($p{QUERY_STRING} // '');
		return if $q{close};
		select(undef, undef, undef, $q{slow}) if $q{slow};
		my $out = '';
		$out .= record(7, $q{stderr}) if defined $q{stderr};
		my $head = "Content-Type: text/plain\r\nX-Port: $port\r\n";
		$head = "Status: $q{status}\r\n$head" if $q{status};
		$head = "Status: 500 Failed\r\n$head" if ($q{fail_on} // '') eq $port;
		$head = "Location: $q{location}\r\n$head" if $q{location};
		my $body = "port=$port conn=$n keep=$keep\n";
		$body .= "$_=$p{$_}\n" for sort keys %p;
		$body .= "stdin=$stdin\n";
		$body .= 'x' x $q{big} if $q{big};
		# The head and the body's start in separate records, split oddly.
		my $all = "$head\r\n$body";
		my $cut = int(length($head) / 2);
		$out .= record(6, substr($all, 0, $cut));
		$out .= record(6, substr($all, $cut));
		$out .= record(7, $q{late}) . record(6, "tail\n") if defined $q{late};
		$out .= record(6, '');
		$out .= record(3, pack('NCCCC', 0, 0, 0, 0, 0));
		syswrite($c, $out) // return;
		return unless $keep;
	}
}

1;
